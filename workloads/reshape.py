"""Other architectures of a captured model without capturing again.

A zoo model whose :class:`~workloads.zoo.registry.ModelSpec` declares ``sizes`` (a
:class:`~workloads.zoo.registry.SizeRule`: its size variables, e.g. batch, tokens, heads, head
size, d_ff, and the key that repeats one block, ``n_layer``) is captured three times per
*family* — model, phase, dtype, the architecture keys the rule does not vary, and which size
variables are 0 or 1 (a size-1 dimension can change what torch traces, so those stay fixed):
at depth 1, 2 and 3, with the size variables set to distinct primes. Then:

* **Depth.** The depth-2 graph is prefix + block + block + suffix and the depth-1 graph
  prefix + block + suffix (found by comparing op sequences); the block's inputs from the
  previous block and the prefix are read off the second block, op names continue torch.fx's
  per-target counters.
* **Sizes.** Every tensor dimension, broadcast size and parameter size is fitted as
  ``c * prod(v_i ** e_i) + e`` (``e`` a small integer, :data:`OFFSETS`): the exponents are
  read off the prime factorisation at the first point and checked at the second.
* **Ops.** An op at new sizes is built by capture's own op builder
  (:func:`workloads.capture._make_op`) from the reshaped tensors, so FLOPs, bytes and attrs
  follow the same code as a capture; each block op is built once and repeated per layer.

The template is then **verified** against the depth-3 capture at a third set of primes: every
op (each field and attr, in order), edge and its bytes, the parameter count and the view-op
counts must be equal; otherwise it is refused (:func:`refusal` says why) and the builder
captures every architecture of that family as before. A verified template is kept for the
process and stored on disk (:mod:`workloads.template_cache`, JSON: each op keeps what the op
builder reads from its exported node, :func:`workloads.capture.node_facts`, not the node), so
a later process on the machine rebuilds the family without capturing. Ops whose attrs read
more than shapes from the exported node (einsum, MoE, scans, recurrences, hash grids, sparse attention) are
refused the same way; a convolution's stride, padding and groups are part of its family.
"""

from __future__ import annotations

import gc
import math
import re
from dataclasses import dataclass
from typing import Any

import networkx as nx

from workloads import ir, structure, template_cache
from workloads.capture import ACT, _make_op, _Tensor, node_facts
from workloads.zoo import get_model

#: Size-variable values of the reference captures: distinct primes, above the constants a
#: family fixes (filter sizes up to 11, strides, groups) so no constant hides a variable, and
#: small enough that a product of three stays within the zoo's bounds; rotated by one place
#: from one capture to the next. The rule's last variable (positions, which must hold any
#: sequence) takes a larger one.
PRIMES = (13, 17, 19, 23, 29, 31, 37, 41, 43, 47, 53)
LAST_PRIMES = (59, 61, 67)
#: Depths of the three reference captures.
DEPTHS = (1, 2, 3)
#: Most elements of a tensor re-shaped; larger ones are left to a capture, which decides whether
#: torch can hold them [R: torch counts a tensor's bytes in int64, 8-byte elements at most].
MAX_ELEMENTS = 2 ** 60
#: Op kinds whose attrs come from the tensor shapes alone (plus attention's causal flag and a
#: convolution's stride, padding and groups, which the size rules keep fixed in a family).
SHAPE_KINDS = (ir.MATMUL, ir.CONV, ir.ATTENTION, ir.ELEMENTWISE, ir.NORM, ir.SOFTMAX, ir.REDUCTION,
               ir.EMBEDDING, ir.DATA_MOVEMENT, ir.UNKNOWN)
#: Offsets a dimension may have over its monomial, smallest first (``context + 1`` keys after
#: an append; a convolution's input rows ``stride * P + r - 2 * padding - stride``).
OFFSETS = (0, 1, -1) + tuple(e for k in range(2, 17) for e in (k, -k))

Expr = tuple[int, tuple[tuple[int, int], ...], int]   # c, ((variable index, power), ...), e


class Refused(Exception):
    """This family cannot be rebuilt from a template (the message says why)."""


@dataclass
class _Input:
    refs: tuple[Any, Any]          # producer in the first block, in later blocks (or prefix/suffix)
    role: str
    shape: tuple[Expr, ...]
    stored: Expr | None
    itemsize: int


@dataclass
class _TemplateOp:
    node: Any                      # the exported node, kept only where ``facts`` is None
    facts: dict[str, Any] | None   # what the op builder reads from it (capture.node_facts)
    aten: str
    kind: str
    inputs: list[_Input]
    outputs: list[tuple[tuple[Expr, ...], int]]
    name: tuple[str, int, int]     # base, index in the first block, step per block


def _ev(x: Expr, vals: list[int]) -> int:
    c, terms, e = x
    for i, p in terms:
        c *= vals[i] ** p
    return c + e


def _fit(a: int, b: int, pa: list[int], pb: list[int]) -> Expr:
    """``c * prod(v ** e) + off`` that is ``a`` at variables ``pa`` and ``b`` at ``pb``."""
    for off in OFFSETS:
        x, terms = a - off, []
        if x == 0:
            if b - off == 0:
                return (0, (), off)
            continue
        if x < 0:
            continue
        for i, p in enumerate(pa):
            if p < 2:
                continue
            k = 0
            while x % p == 0:
                x //= p
                k += 1
            if k:
                terms.append((i, k))
        expr = (x, tuple(terms), off)
        if _ev(expr, pb) == b:
            return expr
    raise Refused(f"a size is no monomial of the size variables ({a} and {b})")


def _name_parts(name: str) -> tuple[str, int]:
    m = re.fullmatch(r"(.*?)(?:_(\d+))?", name)
    return m.group(1), int(m.group(2) or 0)


def _name(base: str, index: int) -> str:
    return base if index == 0 else f"{base}_{index}"


def _sig(rec) -> tuple:
    node, _, aten, kind, inputs, outputs = rec
    return (aten, kind, tuple((t.role, len(t.shape)) for t in inputs), len(outputs))


def _param_pattern(fqn: str) -> str:
    return re.sub(r"(^|\.)\d+(\.|$)", r"\1*\2", fqn, count=1)


def _linear_counts(ca: dict[str, int], cb: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Counts that are ``a + b * depth`` from depth 1 (``ca``) and 2 (``cb``)."""
    return {k: (2 * ca.get(k, 0) - cb.get(k, 0), cb.get(k, 0) - ca.get(k, 0))
            for k in set(ca) | set(cb)}


def _at_depth(counts: dict[str, tuple[int, int]], depth: int) -> dict[str, int]:
    return {k: a + b * depth for k, (a, b) in counts.items() if a + b * depth}


class Template:
    """One family's graph as a function of its size variables and depth (see the module
    docstring); built from three captures by :meth:`from_captures`."""

    def __init__(self, names: list[str], prefix: list[_TemplateOp], block: list[_TemplateOp],
                 suffix: list[_TemplateOp], params: tuple[list[Expr], list[Expr]],
                 free: dict[str, tuple[int, int]], unknown: dict[str, tuple[int, int]]):
        self.names, self.prefix, self.block, self.suffix = names, prefix, block, suffix
        self.params, self.free, self.unknown = params, free, unknown
        self._structures: dict[int, tuple] = {}
        self._preds: dict[int, list[list[int]]] = {}
        self._edge_plans: dict[int, tuple] = {}
        self._compiled: tuple | None = None

    # ------------------------------------------------------------------ building a workload
    def _compile(self) -> tuple:
        """The template's tensors numbered once: the distinct size expressions, the distinct
        shapes (tuples of expression numbers), the distinct tensors (shape, role, itemsize,
        stored expression) and each op's input and output tensor numbers; a build evaluates
        each expression and makes each tensor once, however many ops share it."""
        if self._compiled is not None:
            return self._compiled
        exprs: dict[Expr, int] = {}
        shapes: dict[tuple[int, ...], int] = {}
        tensors: dict[tuple, int] = {}

        def shape_no(shape: tuple[Expr, ...]) -> int:
            key = tuple(exprs.setdefault(d, len(exprs)) for d in shape)
            return shapes.setdefault(key, len(shapes))

        ops = []
        for t in self.prefix + self.block + self.suffix:
            ins = [tensors.setdefault(
                (shape_no(i.shape), i.role, i.itemsize,
                 None if i.stored is None else exprs.setdefault(i.stored, len(exprs))),
                len(tensors)) for i in t.inputs]
            outs = [tensors.setdefault((shape_no(x), ACT, size, None), len(tensors))
                    for x, size in t.outputs]
            ops.append((t, ins, outs))
        self._compiled = (list(exprs), list(shapes), list(tensors), ops)
        return self._compiled

    def unique_ops(self, variables: dict[str, int], dtype: str) -> list[tuple[ir.Op, list[int]]]:
        """The prefix, block and suffix ops at ``variables``, in that order (each op once,
        unnamed), with the bytes each of their inputs carries."""
        vals = [variables[n] for n in self.names]
        elem = ir.DTYPE_BYTES[dtype]
        exprs, shapes, tensors, ops = self._compile()
        ev = [_ev(x, vals) for x in exprs]
        dims = [tuple([ev[d] for d in s]) for s in shapes]
        numel = [math.prod(d) for d in dims]
        largest = max(numel, default=0)
        if largest >= MAX_ELEMENTS:   # torch may refuse it: the capture says
            raise Refused(f"a tensor of {largest} elements")
        made = [_Tensor(None, role, dims[s], numel[s], size, None if st is None else ev[st])
                for s, role, size, st in tensors]
        out = []
        for t, ins, outs in ops:
            xs = [made[i] for i in ins]
            op, _ = _make_op(t.node, "", t.aten, t.kind, xs, [made[o] for o in outs], dtype,
                             elem, t.facts)
            out.append((op, [x.nbytes for x in xs]))
        return out

    def structure(self, depth: int) -> tuple[list[str], list[int], list[tuple[int, int, int]]]:
        """Op names, which unique op (prefix, block, suffix ops numbered in that order) each node
        is, and the edges as (producer node, consumer node, consumer's input slot) at
        ``depth``; the same for any sizes, so kept per depth."""
        hit = self._structures.get(depth)
        if hit is not None:
            return hit
        np_, nb = len(self.prefix), len(self.block)
        names: list[str] = []
        which: list[int] = []
        edges: list[tuple[int, int, int]] = []

        def emit(t: _TemplateOp, unique: int, name: str, side: int, layer: int) -> None:
            me = len(names)
            names.append(name)
            which.append(unique)
            for slot, inp in enumerate(t.inputs):
                ref = inp.refs[side]
                if ref is None:
                    continue
                part, delta, j = ref
                src = {"p": j, "b": np_ + (layer + delta) * nb + j,
                       "last": np_ + (depth - 1) * nb + j, "s": np_ + depth * nb + j}[part]
                edges.append((src, me, slot))

        for j, t in enumerate(self.prefix):
            emit(t, j, _name(t.name[0], t.name[1]), 0, 0)
        for layer in range(depth):
            for j, t in enumerate(self.block):
                base, first, step = t.name
                emit(t, np_ + j, _name(base, first + layer * step), min(layer, 1), layer)
        for j, t in enumerate(self.suffix):
            base, first, step = t.name
            emit(t, np_ + nb + j, _name(base, first + (depth - 1) * step), 0, 0)
        preds: list[list[int]] = [[] for _ in names]
        for src, dst, _ in edges:
            if src not in preds[dst]:
                preds[dst].append(src)
        self._structures[depth] = (names, which, edges)
        self._preds[depth] = preds
        return names, which, edges

    def _edge_plan(self, depth: int) -> tuple:
        """The graph's edges at ``depth`` as one entry per (producer, consumer) pair, in the
        order the edge list first names it: producer number and name, consumer number and
        name, and a key — (unique consumer op, its input slots the producer feeds) — whose
        bytes are the same in every layer, so a build sums them once a key."""
        hit = self._edge_plans.get(depth)
        if hit is not None:
            return hit
        names, which, edges = self.structure(depth)
        slots: dict[tuple[int, int], list[int]] = {}
        for src, dst, slot in edges:
            slots.setdefault((src, dst), []).append(slot)
        keys: dict[tuple, int] = {}
        key_of = [keys.setdefault((which[dst], tuple(s)), len(keys))
                  for (src, dst), s in slots.items()]
        pairs = list(slots)
        hit = ([s for s, _ in pairs], [names[s] for s, _ in pairs],
               [d for _, d in pairs], [names[d] for _, d in pairs], list(keys), key_of)
        self._edge_plans[depth] = hit
        return hit

    def build(self, variables: dict[str, int], depth: int, *, model: str, phase: str,
              dtype: str, batch: int, seq: int, context: int,
              arch: dict[str, Any]) -> ir.Workload:
        """The workload a capture at these sizes and depth would give."""
        # ~5 container objects an op and no reference cycle among them: the cyclic collector,
        # which would otherwise run a few times a build and promote the half-built graph to
        # older generations (whose full passes walk all of torch's objects: with it on, the
        # mean 30-layer build took 2-6x its median), is paused.
        collecting = gc.isenabled()
        gc.disable()
        try:
            return self._build(variables, depth, model=model, phase=phase, dtype=dtype,
                               batch=batch, seq=seq, context=context, arch=arch)
        finally:
            if collecting:
                gc.enable()

    def _build(self, variables: dict[str, int], depth: int, *, model: str, phase: str,
               dtype: str, batch: int, seq: int, context: int,
               arch: dict[str, Any]) -> ir.Workload:
        unique = self.unique_ops(variables, dtype)
        names, which, _ = self.structure(depth)
        src, src_names, dst, dst_names, keys, key_of = self._edge_plan(depth)
        ops = ir.renamed_copies([op for op, _ in unique], names, which)
        nodes = dict(zip(names, [{"op": op, "index": k} for k, op in enumerate(ops)]))
        # bytes add up where one tensor feeds two inputs of an op
        key_bytes = [sum([unique[u][1][s] for s in slots]) for u, slots in keys]
        succ: list[dict] = [{} for _ in names]
        pred: list[dict] = [{} for _ in names]
        for u, v_name, v, u_name, k in zip(src, dst_names, dst, src_names, key_of):
            succ[u][v_name] = pred[v][u_name] = {"bytes": key_bytes[k]}   # one dict an edge
        graph = nx.DiGraph()   # filled as networkx's own readers expect: node, successor and
        graph._node = nodes    # predecessor dicts
        graph._adj = dict(zip(names, succ))
        graph._pred = dict(zip(names, pred))
        vals = [variables[n] for n in self.names]
        const, layered = self.params
        params = sum(_ev(x, vals) for x in const) + depth * sum(_ev(x, vals) for x in layered)
        w = ir.Workload(graph=graph, model=model, phase=phase, dtype=dtype, batch=batch, seq=seq,
                        context=context, arch=dict(arch), params=params,
                        unknown_targets=_at_depth(self.unknown, depth),
                        free_ops=tuple(sorted(_at_depth(self.free, depth).items())))
        w.__dict__["ops"] = ops   # insertion order is the capture's topological order
        # The op structure, known here: which ops are copies of one op (its signature
        # dedupe would merge at least these) and each op's producers.
        structure.attach(w, which, self._preds[depth])
        return w

    # ------------------------------------------------------------------ making a template
    @classmethod
    def from_captures(cls, names: list[str], a, b, pa: list[int], pb: list[int],
                      repeated: bool = True) -> "Template":
        """The template from captures ``a`` (depth 1, variables ``pa``) and ``b`` (depth 2,
        ``pb``), each ``(workload, record)``; :class:`Refused` where they do not fit one.
        Without ``repeated`` the model has no depth: ``a`` and ``b`` are the same graph."""
        (wa, ra), (wb, rb) = a, b
        oa, ob = ra["ops"], rb["ops"]
        for w, rec in (a, b):
            if len(w) != len(rec["ops"]):
                raise Refused("a pattern pass changed the captured graph")
        for rec in oa:
            if rec[3] not in SHAPE_KINDS or rec[2] == "einsum":
                raise Refused(f"op {rec[2]} ({rec[3]}) reads more than shapes")
        k = len(ob) - len(oa)
        sa, sb = [_sig(r) for r in oa], [_sig(r) for r in ob]
        if not repeated:   # no depth: the whole graph is the prefix
            start = len(oa) if sa == sb else None
        else:
            start = next((p for p in range(len(oa) - k + 1) if k > 0
                          and sb[p:p + k] == sb[p + k:p + 2 * k] and sa[:p] == sb[:p]
                          and sa[p:] == sb[p + k:]), None)
        if start is None:
            raise Refused("no repeated block between depth 1 and 2")
        pos = {rec[1]: i for i, rec in enumerate(ob)}

        def where(i: int) -> tuple[str, int]:
            if i < start:
                return "p", i
            if i < start + 2 * k:
                return f"b{(i - start) // k}", (i - start) % k
            return "s", i - start - 2 * k

        def ref(t: _Tensor, seg: str) -> tuple | None:
            if t.producer is None:
                return None
            part, j = where(pos[t.producer])
            if part == "p":
                return ("p", 0, j)
            if part == "s" and seg == "s":
                return ("s", 0, j)
            if seg == "s" and part == "b1":
                return ("last", 0, j)
            if seg in ("b0", "b1") and part in ("b0", "b1"):
                delta = int(part[1]) - int(seg[1])
                if delta in (0, -1):
                    return ("b", delta, j)
            raise Refused(f"{seg} op reads {part}: not a chain of blocks")

        def top(ia: int, ib: int, ib_next: int | None) -> _TemplateOp:
            ra_, rb_ = oa[ia], ob[ib]
            seg = where(ib)[0]
            ins = []
            for n, (ta, tb) in enumerate(zip(ra_[4], rb_[4])):
                if ta.itemsize != tb.itemsize or (ta.stored is None) != (tb.stored is None):
                    raise Refused(f"op {rb_[1]} input {n} changes type")
                later = ref(ob[ib_next][4][n], "b1") if ib_next is not None else None
                ins.append(_Input((ref(tb, seg), later), tb.role,
                                  tuple(_fit(x, y, pa, pb) for x, y in zip(ta.shape, tb.shape)),
                                  None if ta.stored is None else _fit(ta.stored, tb.stored, pa, pb),
                                  tb.itemsize))
            outs = [(tuple(_fit(x, y, pa, pb) for x, y in zip(ta.shape, tb.shape)), tb.itemsize)
                    for ta, tb in zip(ra_[5], rb_[5])]
            base, first = _name_parts(rb_[1])
            step = 0
            if ib_next is not None:
                base2, second = _name_parts(ob[ib_next][1])
                if base2 != base:
                    raise Refused(f"op names {rb_[1]} and {ob[ib_next][1]} differ")
                step = second - first
            elif seg == "s":
                base_a, in_a = _name_parts(ra_[1])
                if base_a != base:
                    raise Refused(f"op names {ra_[1]} and {rb_[1]} differ")
                step, first = first - in_a, in_a
            facts = node_facts(rb_[0], rb_[2], rb_[3], rb_[4])
            return _TemplateOp(rb_[0] if facts is None else None, facts, rb_[2], rb_[3], ins, outs,
                               (base, first, step))

        prefix = [top(i, i, None) for i in range(start)]
        block = [top(start + j, start + j, start + k + j) for j in range(k)]
        suffix = [top(start + k + j, start + 2 * k + j, None)
                  for j in range(len(oa) - start - k)]
        params = cls._fit_params(ra["params"], rb["params"], pa, pb, repeated)
        free = _linear_counts(dict(wa.free_ops), dict(wb.free_ops))
        unknown = _linear_counts(wa.unknown_targets, wb.unknown_targets)
        return cls(names, prefix, block, suffix, params, free, unknown)

    @staticmethod
    def _fit_params(pa_list, pb_list, pa, pb, repeated) -> tuple[list[Expr], list[Expr]]:
        groups_a: dict[str, list[int]] = {}
        groups_b: dict[str, list[int]] = {}
        for fqn, shape in pa_list:
            groups_a.setdefault(_param_pattern(fqn), []).append(math.prod(shape))
        for fqn, shape in pb_list:
            groups_b.setdefault(_param_pattern(fqn), []).append(math.prod(shape))
        const, layered = [], []
        for pat, nb in groups_b.items():
            na = groups_a.get(pat, [])
            if len(na) == 1 and len(nb) in ((1, 2) if repeated else (1,)):
                (const if len(nb) == 1 else layered).append(_fit(na[0], nb[0], pa, pb))
            else:
                raise Refused(f"parameter {pat} is neither one per model nor one per block")
        if set(groups_a) - set(groups_b):
            raise Refused("parameters differ between depths 1 and 2")
        return const, layered


def same_workload(a: ir.Workload, b: ir.Workload) -> str | None:
    """None when ``a`` and ``b`` are the same graph (ops with every field and attr, in order;
    edges and their bytes; parameters, view-op and unknown counts), else the first difference."""
    if len(a.ops) != len(b.ops):
        return f"{len(a.ops)} ops against {len(b.ops)}"
    for x, y in zip(a.ops, b.ops):
        if x != y or x.attrs != y.attrs:
            return f"op {x.name} differs from {y.name}"
    ea = {(u, v): d["bytes"] for u, v, d in a.graph.edges(data=True)}
    eb = {(u, v): d["bytes"] for u, v, d in b.graph.edges(data=True)}
    if ea != eb:
        return "edges differ"
    for f in ("params", "free_ops", "unknown_targets", "batch", "seq", "context", "arch",
              "model", "phase", "dtype", "kv_update"):
        if getattr(a, f) != getattr(b, f):
            return f"{f} differs"
    return None


# ---------------------------------------------------------------------------- the family cache
_TEMPLATES: dict[tuple, Template | str] = {}


def clear_templates() -> None:
    _TEMPLATES.clear()


def _family(args: dict[str, Any]):
    """(rule, variables, family key) of resolved zoo arguments, or None when not covered."""
    spec = get_model(args["model"])
    rule = spec.sizes
    if rule is None:
        return None
    arch = args["arch"]
    variables = rule.variables(arch, args["phase"], args["batch"], args["seq"], args["context"])
    if variables is None:
        return None
    varied = set(rule.point(variables, args["phase"], arch)[0]) | {rule.depth}
    fixed_arch = tuple(sorted((k, repr(v)) for k, v in arch.items() if k not in varied))
    fixed_vars = tuple((k, v) for k, v in variables.items() if v in (0, 1))
    return rule, variables, (args["model"], args["phase"], args["dtype"], fixed_arch, fixed_vars)


def _primes(n: int, capture: int) -> list[int]:
    """Values of ``n`` free size variables in reference capture ``capture`` (0, 1, 2)."""
    if n - 1 > len(PRIMES):
        raise Refused(f"{n} size variables: at most {len(PRIMES) + 1}")
    rest = PRIMES[capture:] + PRIMES[:capture]
    return list(rest[:n - 1]) + [LAST_PRIMES[capture]] if n else []


def _reference(args: dict[str, Any], rule, variables: dict[str, int], capture: int, depth: int):
    from workloads import build
    free = [k for k, v in variables.items() if v not in (0, 1)]
    point = {**variables, **dict(zip(free, _primes(len(free), capture)))}
    over, batch, seq, context = rule.point(point, args["phase"], args["arch"])
    arch = {**args["arch"], **over, **({rule.depth: depth} if rule.depth else {})}
    ref = build.resolve(args["model"], args["phase"], batch, seq or None,   # 0: not a size
                        context if args["phase"] == "decode" else None, args["dtype"], arch)
    record: dict = {}
    return build._capture_zoo(ref, record), record, point, ref


def template_for(args: dict[str, Any], make: bool = True) -> Template | None:
    """The verified template of resolved zoo arguments' family (with ``make``, captured and
    verified on first use, then kept for the process), or None when the family is not covered,
    was refused, or (without ``make``) has none yet."""
    fam = _family(args)
    return None if fam is None else _template(args, fam, make)


def _template(args: dict[str, Any], fam: tuple, make: bool) -> Template | None:
    """:func:`template_for` of ``args`` whose :func:`_family` is ``fam``."""
    rule, variables, key = fam
    hit = _TEMPLATES.get(key)
    if hit is None and make:
        hit = template_cache.load(key)   # verified by an earlier process on this machine
        if hit is not None:
            _TEMPLATES[key] = hit
    if hit is None and make:
        try:
            refs = [_reference(args, rule, variables, i, d) for i, d in enumerate(DEPTHS)]
            names = list(variables)
            vals = [[r[2][n] for n in names] for r in refs]
            t = Template.from_captures(names, refs[0][:2], refs[1][:2], vals[0], vals[1],
                                       repeated=rule.depth is not None)
            wc, _, point, ref = refs[2]
            mine = t.build(point, DEPTHS[2] if rule.depth else 0, model=ref["model"],
                           phase=ref["phase"],
                           dtype=ref["dtype"], batch=ref["batch"], seq=wc.seq,
                           context=ref["context"], arch=ref["arch"])
            diff = same_workload(mine, wc)
            if diff:
                raise Refused(f"verification against a capture failed: {diff}")
            hit = t
            template_cache.store(key, t)
        except Refused as exc:
            hit = str(exc)
        except Exception as exc:  # a reference size the model refuses: capture as before
            hit = f"{type(exc).__name__}: {exc}"
        _TEMPLATES[key] = hit
    if hit is None or isinstance(hit, str):
        return None
    return hit


def refusal(args: dict[str, Any]) -> str | None:
    """Why resolved zoo arguments' family has no template (None when it has one or was never
    asked for)."""
    fam = _family(args)
    hit = _TEMPLATES.get(fam[2]) if fam else "the model declares no size rule"
    return hit if isinstance(hit, str) else None


def reshaped(args: dict[str, Any], make: bool = True) -> ir.Workload | None:
    """The workload of resolved zoo arguments (:func:`workloads.build.resolve`) built from its
    family's template (made first if ``make``), or None where a capture is needed."""
    fam = _family(args)
    t = None if fam is None else _template(args, fam, make)
    if t is None:
        return None
    rule, variables, _ = fam
    spec = get_model(args["model"])
    depth = args["arch"][rule.depth] if rule.depth else 0
    try:
        return t.build(variables, depth, model=args["model"], phase=args["phase"],
                       dtype=args["dtype"], batch=args["batch"],
                       seq=args["seq"] if spec.family in ("llm", "encoder") else 0,
                       context=args["context"], arch=args["arch"])
    except Refused:
        return None
