"""A re-shaped family's graph as functions of the architecture vector: a population of
architectures as arrays, no workload built per architecture.

:mod:`workloads.reshape` fits every tensor size of a family (model, phase, dtype, fixed arch
keys) as a monomial of its size variables and rebuilds one architecture's workload from it.
Here the same template is evaluated for P architectures at once: the size variables are
``(variables, P)`` int64 arrays, every tensor's dimensions, elements and bytes are arrays, and
each unique op's numbers (FLOPs, bytes by role, GEMM and attention dimensions, elements) are
computed from them by :func:`op_numbers`, the arithmetic of capture's op builder
(:func:`workloads.capture._make_op`) over arrays for the op kinds a template holds. The graph's
structure is the template's: prefix, ``depth`` repeated blocks, suffix, each op's producers
read off its input references (:meth:`FamilyArrays.layers`).

A family is used only once its arrays equal the template's own ops (built by ``_make_op``) at
the reference points and at random points (:func:`family_arrays` checks every number of every
unique op, and each input's bytes); otherwise it is refused (None) and callers build each
architecture's workload as before.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from workloads import ir
from workloads.capture import ACT, KV, WEIGHT
from workloads.op_kinds import FLOPS_PER_ELEMENT
from workloads.reshape import MAX_ELEMENTS, Template, _ev

#: Numbers of an op computed for every architecture (besides its kind): the Op fields and
#: attrs the fast path and the study's metrics read.
FIELDS = ("flops", "weight_bytes", "activation_bytes_read", "activation_bytes_written",
          "kv_bytes_read", "kv_bytes_written")
#: Random points at which a family's arrays are checked against its template's ops.
CHECK_POINTS = 6


@dataclass
class _Static:
    """What one template op's numbers depend on besides the sizes (fixed in a family)."""

    kind: str
    aten: str
    ins: list[int]             # tensor numbers
    outs: list[int]
    roles: list[str]
    causal: bool


class FamilyArrays:
    """One family's template (:class:`workloads.reshape.Template`) for arrays of size
    variables; see the module docstring."""

    def __init__(self, template: Template, dtype: str):
        self.template, self.dtype = template, dtype
        self.elem = ir.DTYPE_BYTES[dtype]
        exprs, shapes, tensors, ops = template._compile()
        self.exprs, self.shapes, self.tensors = exprs, shapes, tensors
        self.ops: list[_Static] = []
        for t, ins, outs in ops:
            causal = t.kind == ir.ATTENTION and bool(t.facts and t.facts.get("causal"))
            self.ops.append(_Static(t.kind, t.aten, list(ins), list(outs),
                                    [self.tensors[i][1] for i in ins], causal))
        self.n_prefix, self.n_block = len(template.prefix), len(template.block)

    # ------------------------------------------------------------------ tensors
    def tensor_arrays(self, vals: np.ndarray):
        """``(dims, numel, nbytes)`` of every template tensor for ``vals`` (``(variables,
        P)`` int64): dims a tuple of ``(P,)`` arrays per tensor. ValueError where an element
        count reaches :data:`workloads.reshape.MAX_ELEMENTS` (left to a capture)."""
        ev = []
        for c, terms, e in self.exprs:
            x = np.full(vals.shape[1], c, dtype=np.int64)
            for i, p in terms:
                x = x * vals[i] ** p
            ev.append(x + e)
        shape_dims = [tuple(ev[d] for d in s) for s in self.shapes]
        shape_numel = []
        for dims in shape_dims:
            n = np.ones(vals.shape[1], dtype=np.int64)
            big = np.zeros(vals.shape[1], dtype=bool)
            for d in dims:
                big |= (d > 0) & (n > 0) & (n >= MAX_ELEMENTS // np.maximum(d, 1))
                n = n * d
            if big.any():
                raise ValueError("a tensor too large for int64 arithmetic")
            shape_numel.append(n)
        dims, numel, nbytes = [], [], []
        for s, role, size, st in self.tensors:
            n = shape_numel[s]
            dims.append(shape_dims[s])
            numel.append(n)
            stored = n if st is None else np.minimum(ev[st], n)
            nbytes.append(stored * size)
        return dims, numel, nbytes

    # ------------------------------------------------------------------ op numbers
    def op_numbers(self, vals: np.ndarray) -> list[dict[str, Any]]:
        """Per unique op (prefix, block, suffix order) its numbers for every architecture:
        :data:`FIELDS`, ``attrs`` (arrays, or constants) and ``input_bytes`` (per input)."""
        dims, numel, nbytes = self.tensor_arrays(vals)
        zero = np.zeros(vals.shape[1], dtype=np.int64)
        return [op_numbers(o, dims, numel, nbytes, zero) for o in self.ops]

    # ------------------------------------------------------------------ structure
    def layers(self) -> tuple[list[list[tuple]], list[list[tuple]], list[list[tuple]]]:
        """Producers of each prefix, block and suffix op as references: ``("p", j)`` prefix op
        ``j``; ``("b", delta, j)`` block op ``j`` of this layer (delta 0) or the previous (-1),
        per side (first layer, later layers); ``("last", j)`` block op ``j`` of the last
        layer; ``("s", j)`` suffix op ``j``. Duplicates removed, first-seen order."""
        t = self.template

        def refs(op, side: int) -> list[tuple]:
            out: list[tuple] = []
            for inp in op.inputs:
                r = inp.refs[side]
                if r is None:
                    continue
                part, delta, j = r
                key = ("b", delta, j) if part == "b" else (part, j)
                if key not in out:
                    out.append(key)
            return out

        return ([refs(o, 0) for o in t.prefix],
                [[refs(o, 0), refs(o, 1)] for o in t.block],
                [refs(o, 0) for o in t.suffix])


def _sum(xs: list, zero: np.ndarray):
    total = zero
    for x in xs:
        total = total + x
    return total


def op_numbers(o: _Static, dims, numel, nbytes, zero) -> dict[str, Any]:
    """The numbers :func:`workloads.capture._make_op` gives the op ``o`` (shape kinds), over
    arrays."""
    ins, outs = o.ins, o.outs
    weight = act_r = kv_r = kv_w = zero
    out_role = ACT
    attrs: dict[str, Any] = {}
    out_elems = _sum([numel[t] for t in outs], zero)
    flops = FLOPS_PER_ELEMENT.get(o.kind, 0) * out_elems
    name = o.aten
    if name in ("cat", "concat") and KV in o.roles:
        new = [t for t, r in zip(ins, o.roles) if r != KV]
        act_r = _sum([nbytes[t] for t in new], zero)
        kv_w = act_r
        out_role = KV
        attrs["kv_append"] = True
        attrs["elements"] = _sum([numel[t] for t in new], zero)
    elif name in ("copy_", "copy") and len(ins) >= 2 and o.roles[0] == KV:
        src = ins[1]
        if o.roles[1] == KV:
            kv_r = nbytes[src]
        else:
            act_r = nbytes[src]
        kv_w = nbytes[ins[0]]
        out_role = KV
        attrs["elements"] = numel[ins[0]]
    elif o.kind == ir.EMBEDDING and ins and o.roles[0] == WEIGHT:
        weight = _sum([nbytes[t] for t in outs], zero)
        act_r = _sum([nbytes[t] for t in ins[1:]], zero)
        attrs["elements"] = out_elems
    else:
        for t, r in zip(ins, o.roles):
            if r == WEIGHT:
                weight = weight + nbytes[t]
            elif r == KV:
                kv_r = kv_r + nbytes[t]
            else:
                act_r = act_r + nbytes[t]
        if o.kind == ir.MATMUL:
            attrs = _matmul(o, dims, numel)
            flops = 2 * attrs["batch"] * attrs["m"] * attrs["n"] * attrs["k"]
        elif o.kind == ir.ATTENTION:
            attrs = _attention(o, dims)
            flops = attrs.pop("_flops")
        elif o.kind == ir.CONV:
            raise ValueError("convolutions are left to the per-architecture build")
        else:
            attrs["elements"] = out_elems
    act_w = _sum([nbytes[t] for t in outs], zero) if out_role == ACT else zero
    return {"kind": o.kind, "flops": flops, "weight_bytes": weight,
            "activation_bytes_read": act_r, "activation_bytes_written": act_w,
            "kv_bytes_read": kv_r, "kv_bytes_written": kv_w, "attrs": attrs,
            "input_bytes": [nbytes[t] for t in ins],
            "output_elements": out_elems if outs else None}


def _matmul(o: _Static, dims, numel) -> dict[str, Any]:
    """capture._matmul_attrs over arrays."""
    name, ins = o.aten, o.ins
    if name == "linear":
        a, w = ins[0], ins[1]
        k = dims[a][-1]
        return {"m": numel[a] // np.maximum(k, 1), "n": dims[w][0], "k": k, "batch": 1,
                "weight_operand": o.roles[1] == WEIGHT}
    ia, ib = (1, 2) if name in ("addmm", "baddbmm") else (0, 1)
    sa, sb = list(dims[ins[ia]]), list(dims[ins[ib]])
    one = np.ones_like(sa[0])
    if len(sa) == 1:
        sa = [one] + sa
    if len(sb) == 1:
        sb = sb + [one]
    m, k, n = sa[-2], sa[-1], sb[-1]
    batch_a, batch_b = sa[:-2], sb[:-2]
    nd = max(len(batch_a), len(batch_b))
    batch_a = [one] * (nd - len(batch_a)) + batch_a
    batch_b = [one] * (nd - len(batch_b)) + batch_b
    batch = one
    for x, y in zip(batch_a, batch_b):
        batch = batch * np.maximum(x, y)
    prod_b = one
    for y in batch_b:
        prod_b = prod_b * y
    fold = (prod_b == 1) & (batch > 1)   # broadcast weight: batch folded into m
    return {"m": np.where(fold, m * batch, m), "n": n, "k": k, "batch": np.where(fold, 1, batch),
            "weight_operand": o.roles[ib] == WEIGHT}


def _attention(o: _Static, dims) -> dict[str, Any]:
    """capture._attention_attrs over arrays."""
    q, k, v = (dims[t] for t in o.ins[:3])
    one = np.ones_like(q[-1])
    b = one
    if len(q) > 3:
        for x in q[:-3]:
            b = b * x
    heads = q[-3] if len(q) >= 3 else one
    sq, d = q[-2], q[-1]
    kv_heads = k[-3] if len(k) >= 3 else one
    skv, dv = k[-2], v[-1]
    flops = 2 * b * heads * sq * skv * d + 2 * b * heads * sq * skv * dv
    if o.causal:
        mm = np.minimum(sq, skv)
        visible = mm * (mm + 1) // 2 + np.maximum(0, sq - skv) * skv
        causal_flops = flops * visible // (sq * skv)
    else:
        causal_flops = flops
    return {"batch": b, "heads": heads, "kv_heads": kv_heads, "q_len": sq, "kv_len": skv,
            "head_dim": d, "value_dim": dv, "causal": o.causal, "causal_flops": causal_flops,
            "_flops": flops}


# ---------------------------------------------------------------------------- checked use
_CHECKED: dict[tuple, tuple[Template, FamilyArrays | None]] = {}


def family_arrays(template: Template, dtype: str, names: list[str],
                  points: list[dict[str, int]]) -> FamilyArrays | None:
    """The :class:`FamilyArrays` of ``template`` in ``dtype``, checked equal to the template's
    own ops at ``points`` and at :data:`CHECK_POINTS` random points near them (made once per
    template and dtype); None where any number differs or the family holds an op kind the
    arrays do not cover."""
    key = (id(template), dtype)
    hit = _CHECKED.get(key)
    if hit is not None and hit[0] is template:
        return hit[1]
    try:
        fam = FamilyArrays(template, dtype)
        rng = random.Random(0)
        check = list(points)
        for _ in range(CHECK_POINTS):
            base = rng.choice(points)
            check.append({k: v if v in (0, 1) else max(2, v + rng.randint(-3, 5))
                          for k, v in base.items()})
        ok = all(_same(fam, template, names, p, dtype) for p in check)
    except (ValueError, KeyError, IndexError, TypeError):
        ok = False
    _CHECKED[key] = (template, fam if ok else None)
    return _CHECKED[key][1]


def _same(fam: FamilyArrays, template: Template, names: list[str], point: dict[str, int],
          dtype: str) -> bool:
    vals = np.array([[point[n]] for n in names], dtype=np.int64)
    mine = fam.op_numbers(vals)
    for (op, in_bytes), got in zip(template.unique_ops(point, dtype), mine):
        if op.kind != got["kind"]:
            return False
        for f in FIELDS:
            if int(np.asarray(got[f]).ravel()[0]) != getattr(op, f):
                return False
        if [int(np.asarray(x).ravel()[0]) for x in got["input_bytes"]] != list(in_bytes):
            return False
        attrs = {k: (v if isinstance(v, bool) else int(np.asarray(v).ravel()[0]))
                 for k, v in got["attrs"].items()}
        if attrs != op.attrs:
            return False
        outs = [math.prod(s) for s in op.output_shapes if s is not None]
        if got["output_elements"] is not None and outs and \
                int(np.asarray(got["output_elements"]).ravel()[0]) != sum(outs):
            return False
    return True


# ---------------------------------------------------------------------------- graph arithmetic
def liveness_plan(template: Template, depth: int) -> dict[str, Any]:
    """The graph at ``depth`` as the activation footprint reads it (workloads.footprint):
    each node's unique op, its consumers' edge keys, the last position its output is read at,
    and the edge keys feeding it; an edge key is (unique consumer op, its input slots)."""
    names, which, _ = template.structure(depth)
    src, _, dst, _, keys, key_of = template._edge_plan(depth)
    n = len(names)
    out_keys: list[list[int]] = [[] for _ in range(n)]
    in_keys: list[list[int]] = [[] for _ in range(n)]
    last_use = list(range(n))
    for s, d, k in zip(src, dst, key_of):
        out_keys[s].append(k)
        in_keys[d].append(k)
        last_use[s] = max(last_use[s], d)
    return {"which": which, "out_keys": out_keys, "in_keys": in_keys, "last_use": last_use,
            "keys": keys}


def peak_activation_bytes(plan: dict[str, Any], numbers: list[dict[str, Any]],
                          zero: np.ndarray) -> np.ndarray:
    """workloads.footprint.peak_live_activation_bytes over arrays (every value an integer
    number of bytes, so float sums are exact in any order)."""
    key_bytes = [_sum([numbers[u]["input_bytes"][s] for s in slots], zero).astype(np.float64)
                 for u, slots in plan["keys"]]
    which, last_use = plan["which"], plan["last_use"]
    n = len(which)
    out_b = []
    for i in range(n):
        b = zero.astype(np.float64)
        for k in plan["out_keys"][i]:
            b = np.maximum(b, key_bytes[k])
        out_b.append(b)
    f0 = zero.astype(np.float64)
    delta: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]   # (sign, node)
    for i in range(n):
        if last_use[i] > i:   # alive on (i, last_use[i]]
            delta[i + 1].append((1, i))
            delta[last_use[i] + 1].append((-1, i))
    peak, alive = f0, f0
    for i in range(n):
        for sign, j in delta[i]:
            alive = alive + out_b[j] if sign > 0 else alive - out_b[j]
        fed = _sum([key_bytes[k] for k in plan["in_keys"][i]], f0)
        num = numbers[which[i]]
        external = np.maximum(0.0, num["activation_bytes_read"] - fed)
        peak = np.maximum(peak, alive + external + num["activation_bytes_written"])
    return peak
