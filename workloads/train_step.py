"""What a training step adds to its joint forward-backward graph: the precision of each tensor
role, the optimizer's update, gradient accumulation over micro-batches and activation
recomputation.

**Precision** (:class:`Precision`): a format per tensor role — ``activations`` (and the
weights as the ops read them: the compute precision, the workload's dtype), ``weights`` (the
model's stored copy), ``gradients`` (as accumulated and reduced), ``master_weights`` (a copy
the optimizer updates, or none) and ``optimizer_states``. :meth:`Precision.bytes_of` is the
one place a role becomes bytes per element, so the formats issue's role -> format table
(block formats with scale overhead, fractional bytes) replaces ``DTYPE_BYTES`` there alone.
Presets (bytes per parameter with Adam: weights + gradients + master + 2 states):

* ``mixed``: bf16 weights and gradients, fp32 master and states: 2 + 2 + 4 + 8 = 16 B
  [P Rajbhandari et al. 2020 (ZeRO), sec. 3.1: "2Ψ + 2Ψ + 12Ψ"];
* ``mixed-fp32-grads``: Megatron-LM's bf16 recipe, gradients accumulated and reduced in fp32:
  2 + 4 + 4 + 8 = 18 B [R Megatron-LM docs, distributed optimizer: "18 bytes per parameter"];
* ``amp``: PyTorch autocast: fp32 weights, gradients and states, bf16 compute: 16 B;
* ``bf16``: everything in bf16 (``model.to(bfloat16)`` + AdamW): 2 + 2 + 4 = 8 B;
* ``fp32``: 4 + 4 + 8 = 16 B;
* ``fp8``: ``mixed`` with the transformer blocks' GEMMs in FP8 (``gemm``, below): 16 B.

**Low-precision GEMMs** (``gemm``, a format of :mod:`workloads.formats`; None: the compute
dtype): Transformer Engine's recipe [R NVIDIA TransformerEngine docs, "Using FP8 with
Transformer Engine": ``te.Linear`` runs its forward GEMM, its data-gradient GEMM and its
weight-gradient GEMM in FP8, each operand cast with its own scale (E4M3 forward, E5M2
gradients in the HYBRID recipe: one byte and the same tensor-core datapath, so one format
here); layers outside the blocks (embedding, LM head, loss) stay in higher precision, as
Megatron-LM's ``--fp8-format`` applies to its transformer layers only]. :func:`gemm_formatted`
puts every matmul of the blocks in it: the forward and data-gradient GEMMs (weights and
activations) and the weight-gradient GEMMs (both activation operands); attention, norms and
element-wise ops stay in the compute dtype. Not modelled (so the step time is an upper bound
on this side): the cast kernels (TE fuses most into the norm and activation kernels) and the
FP8 copies TE saves for backward (the activations kept are counted in the compute dtype); the
stored roles (``weights`` ... ``optimizer_states``) are as the preset says, so TE's FP8
weight cache (1 B per block parameter, when kept across micro-batches) is not counted.

**Optimizers** (:data:`OPTIMIZERS`): each a list of element-wise passes as torch.optim
implements them (``foreach`` / ``for-loop``: one kernel per pass; ``fused``: one kernel
reading the parameter, its gradient and states and writing the parameter and states). FLOPs
per element are hand-counted from torch's update (``_multi_tensor_adamw``): decoupled weight
decay ``p *= 1 - lr wd`` (1), ``m.lerp_(g, 1 - b1)`` (3), ``v *= b2`` (1),
``v.addcmul_(g, g, 1 - b2)`` (3), ``t = sqrt(v)`` (1), ``t /= sqrt(bias correction 2)`` (1),
``t += eps`` (1), ``p.addcdiv_(m, t, -step)`` (3): 14 for AdamW, 13 for Adam; SGD
``p.add_(g, alpha=-lr)`` 2; SGD with momentum ``buf.mul_(mu).add_(g)`` (2) then
``p.add_(buf, alpha=-lr)`` (2): 4. A master-weight policy also writes the compute copy of
the weights.

**Recompute** (activation checkpointing, Korthikanti et al. 2022 sec. 4-5): ``none``;
``full``: every block's forward is run again before its backward and only the block's
input is kept; ``selective``: the attention core (from the score matmul through the softmax
and dropout to, not including, the matmul with V) is run again and its outputs are not kept.
A fused (flash) attention keeps no score matrix, so ``selective`` changes nothing there.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import networkx as nx

from dse.errors import BadInput
from workloads import formats as fmts
from workloads import ir
from workloads.memo import per_workload
from workloads.ir import Op, Workload
from workloads.patterns import _activation_matmul
from workloads.training import BWD, FWD, OPT, layer_multiplicity, layers_of, source_layer

RECOMPUTE = "recompute"
RECOMPUTE_MODES = ("none", "selective", "full")
ROLES = ("activations", "weights", "gradients", "master_weights", "optimizer_states")


@dataclass(frozen=True)
class Precision:
    """The format of each tensor role (:data:`ROLES`; ``master_weights`` may be None)."""

    name: str
    activations: str = "bf16"
    weights: str = "bf16"
    gradients: str = "bf16"
    master_weights: str | None = "fp32"
    optimizer_states: str = "fp32"
    #: The format the blocks' GEMMs multiply in (:func:`gemm_formatted`); None: ``activations``.
    gemm: str | None = None

    def __post_init__(self) -> None:
        if self.gemm is not None:
            object.__setattr__(self, "gemm", fmts.get_format(self.gemm, "precision.gemm").name)
        for role in ROLES:
            fmt = getattr(self, role)
            if fmt is None and role == "master_weights":
                continue
            if fmt not in ir.DTYPE_BYTES:
                raise BadInput(f"precision.{role}", fmt,
                               "expected one of " + ", ".join(ir.DTYPE_BYTES))

    def bytes_of(self, role: str) -> float:
        """Bytes per element of ``role`` (0 for an absent master copy)."""
        fmt = getattr(self, role)
        return 0.0 if fmt is None else float(ir.DTYPE_BYTES[fmt])

    @property
    def update_format(self) -> str:
        """The copy the optimizer updates: the master weights, else the weights."""
        return self.master_weights or self.weights

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, **{r: getattr(self, r) for r in FIELDS}}


#: What a precision mapping may set: the stored roles and the GEMM format.
FIELDS = ROLES + ("gemm",)


PRECISIONS: dict[str, Precision] = {
    "mixed": Precision("mixed"),
    "mixed-fp32-grads": Precision("mixed-fp32-grads", gradients="fp32"),
    "amp": Precision("amp", weights="fp32", gradients="fp32", master_weights=None),
    "bf16": Precision("bf16", optimizer_states="bf16", master_weights=None),
    "fp32": Precision("fp32", activations="fp32", weights="fp32", gradients="fp32",
                      master_weights=None),
    "fp8": Precision("fp8", gemm="fp8_e4m3"),
}


def precision_from(value: str | Precision | dict | None) -> Precision:
    """A :class:`Precision` from a preset name, a dict of roles (``{"name": ...,
    "gradients": "fp32"}`` over the ``mixed`` preset), the same as text
    (``"mixed,gemm=nvfp4"``) or itself."""
    if value is None:
        return PRECISIONS["mixed"]
    if isinstance(value, Precision):
        return value
    if isinstance(value, str) and ("," in value or "=" in value):
        name, *pairs = [p.strip() for p in value.split(",")]
        if "=" in name or any("=" not in p for p in pairs):
            raise BadInput("precision", value, "expected PRESET[,role=format...], e.g. "
                           "mixed,gemm=nvfp4")
        roles = [p.split("=", 1) for p in pairs]
        if len({r.strip() for r, _ in roles}) < len(roles):
            raise BadInput("precision", value, "expected each role once")
        return precision_from({"name": name, **{r.strip(): f.strip() for r, f in roles}})
    if isinstance(value, str):
        if value not in PRECISIONS:
            raise BadInput("precision", value, "expected one of " + ", ".join(PRECISIONS)
                           + " or a mapping of roles")
        return PRECISIONS[value]
    if isinstance(value, dict):
        base = PRECISIONS.get(str(value.get("name", "mixed")))
        if base is None:
            raise BadInput("precision.name", value.get("name"), "expected one of "
                           + ", ".join(PRECISIONS))
        extra = [k for k in value if k not in (*FIELDS, "name")]
        if extra:
            raise BadInput(f"precision.{extra[0]}", value[extra[0]], "expected one of "
                           + ", ".join(("name",) + FIELDS))
        fields = {r: getattr(base, r) for r in FIELDS}
        fields.update({k: v for k, v in value.items() if k in FIELDS})
        return Precision(str(value.get("name", base.name)), **fields)
    raise BadInput("precision", value, "expected a preset name or a mapping of roles")


def gemm_formatted(joint: Workload, gemm: str | None) -> Workload:
    """``joint`` with the matmuls of its captured blocks (``0 <= layer < captured``) in
    ``gemm`` (see the module docstring): forward and data-gradient GEMMs through the formats pass
    (:func:`workloads.formats.format_op`: weights and activations), weight-gradient GEMMs
    (a backward matmul without a weight operand whose output leaves the graph) with both
    operands in it; every other op in the compute dtype. ``joint`` itself for None (or a
    ``gemm`` equal to its dtype); kept beside ``joint`` per format (caches keyed by workload
    keep working). FLOPs and edges are unchanged."""
    name = None if gemm is None else fmts.get_format(gemm, "precision.gemm").name
    if name is None or name == fmts.get_format(joint.dtype).name:
        return joint
    return per_workload(joint, ("train-gemm", name), lambda: _gemm_formatted(joint, name))


def _gemm_formatted(joint: Workload, gemm: str) -> Workload:
    if fmts.has_formats(joint):
        raise BadInput("precision.gemm", gemm, "a joint graph without formats (give the "
                       "number formats of a training step through precision, not formats)")
    f = fmts.get_format(gemm)
    base = fmts.parse_formats({}, joint.dtype)
    blocks = fmts.parse_formats({"weights": f.name, "activations": f.name}, joint.dtype)
    layers = layers_of(joint)[1]        # the blocks captured (the head's layer comes after)
    g = joint.graph.copy()
    for name, data in g.nodes(data=True):
        op = data["op"]
        in_block = op.kind == ir.MATMUL and 0 <= int(op.attrs.get("layer", -1)) < layers
        if in_block and not op.attrs.get("weight_operand"):
            if op.attrs.get("pass") != BWD or joint.graph.out_degree(name):
                in_block = False            # attention's own matmuls (eager), not a wgrad
            else:
                b = max(op.bytes_per_element, 1)
                data["op"] = replace(op, activation_bytes_read=fmts.tensor_bytes(
                    f, op.activation_bytes_read // b, int(op.attrs.get("k") or 0) or None),
                    attrs={**op.attrs, "formats": f"w={f.name},a={f.name},kv={base.base},"
                                                  f"b={base.base}"})
                continue
        data["op"] = fmts.format_op(op, blocks if in_block else base, head=False)
    out = replace(joint, graph=g)
    out.__dict__.pop("ops", None)
    per_workload(out, "formats", lambda: blocks)
    return out


# ------------------------------------------------------------------------------ optimizers
@dataclass(frozen=True)
class Pass:
    """One element-wise pass of an optimizer: FLOPs per element, and the tensors it reads and
    writes by role (``p``: the updated copy, ``g``: gradient, ``s``: a state, ``t``: a
    temporary in the state format, ``w``: the compute copy of the weights)."""

    name: str
    flops: int
    reads: str
    writes: str


#: Optimizers as torch.optim's foreach passes (see the module docstring).
OPTIMIZERS: dict[str, dict[str, Any]] = {
    "sgd": {"states": 0, "passes": (Pass("p.add_(g, -lr)", 2, "pg", "p"),)},
    "momentum": {"states": 1, "passes": (Pass("buf.mul_(mu)", 1, "s", "s"),
                                         Pass("buf.add_(g)", 1, "sg", "s"),
                                         Pass("p.add_(buf, -lr)", 2, "ps", "p"))},
    "adam": {"states": 2, "passes": (
        Pass("m.lerp_(g, 1-b1)", 3, "sg", "s"), Pass("v.mul_(b2)", 1, "s", "s"),
        Pass("v.addcmul_(g, g, 1-b2)", 3, "sg", "s"), Pass("t = v.sqrt()", 1, "s", "t"),
        Pass("t.div_(bc2_sqrt)", 1, "t", "t"), Pass("t.add_(eps)", 1, "t", "t"),
        Pass("p.addcdiv_(m, t, -step)", 3, "pst", "p"))},
}
OPTIMIZERS["adamw"] = {"states": 2, "passes": (Pass("p.mul_(1-lr*wd)", 1, "p", "p"),)
                       + OPTIMIZERS["adam"]["passes"]}
IMPLS = ("fused", "foreach", "for-loop")


@dataclass(frozen=True)
class Optimizer:
    """An optimizer (:data:`OPTIMIZERS`) and its implementation (:data:`IMPLS`)."""

    name: str = "adamw"
    impl: str = "fused"

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZERS:
            raise BadInput("optimizer", self.name, "expected one of " + ", ".join(OPTIMIZERS))
        if self.impl not in IMPLS:
            raise BadInput("optimizer_impl", self.impl, "expected one of " + ", ".join(IMPLS))

    @property
    def states(self) -> int:
        return OPTIMIZERS[self.name]["states"]

    @property
    def passes(self) -> tuple[Pass, ...]:
        return OPTIMIZERS[self.name]["passes"]

    @property
    def flops_per_param(self) -> int:
        return sum(p.flops for p in self.passes)

    def kernels(self, precision: Precision) -> list[tuple[str, int, float, float]]:
        """Per kernel: (name, FLOPs per element, bytes read and written per element)."""
        size = {"p": precision.bytes_of(precision.master_weights and "master_weights"
                                         or "weights"),
                "g": precision.bytes_of("gradients"),
                "s": precision.bytes_of("optimizer_states"),
                "t": precision.bytes_of("optimizer_states")}
        copy = precision.bytes_of("weights") if precision.master_weights else 0.0
        if self.impl == "fused":
            reads = size["p"] + size["g"] + self.states * size["s"]
            writes = size["p"] + self.states * size["s"] + copy
            return [(f"{self.name}_fused", self.flops_per_param, reads, writes)]
        out = [(p.name, p.flops, sum(size[c] for c in p.reads), sum(size[c] for c in p.writes))
               for p in self.passes]
        if copy:
            out.append(("weights.copy_(master)", 0, size["p"], copy))
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "impl": self.impl, "states": self.states,
                "flops_per_param": self.flops_per_param}


def optimizer_from(name: str | Optimizer | None, impl: str | None = None) -> Optimizer:
    if isinstance(name, Optimizer):
        return name
    return Optimizer("adamw" if name is None else name, "fused" if impl is None else impl)


# ------------------------------------------------------------------------------ parameters
def params_by_layer(w: Workload, tensors: bool = False) -> dict[int, int]:
    """Trainable parameter elements (``tensors``: parameter tensors) by block of the model
    (``-1`` before the blocks, ``layers`` after), each counted at its first forward use (tied
    weights once). A capture without tensor counts counts one per op that first uses any."""
    captured: dict[int, int] = {}
    for op in w.ops:
        e = op.attrs.get("param_elems")
        if e and op.attrs.get("pass") == FWD:
            layer = int(op.attrs.get("layer", 0))
            e = int(op.attrs.get("param_tensors", 1)) if tensors else int(e)
            captured[layer] = captured.get(layer, 0) + e
    layers, _ = layers_of(w)
    out = {}
    for layer in range(-1, layers + 1):
        n = captured.get(source_layer(w, layer), 0)
        if n:
            out[layer] = n
    return out


def optimizer_ops(w: Workload, optimizer: Optimizer, precision: Precision,
                  params: dict[int, int] | None = None, prefix: str = "opt") -> list[Op]:
    """The optimizer's kernels: one set per block's parameters (``params``, by default
    :func:`params_by_layer`), each an ``elementwise`` op of pass ``opt``."""
    params = params_by_layer(w) if params is None else params
    out = []
    for layer in sorted(params):
        n = int(params[layer])
        if n <= 0:
            continue
        for i, (name, flops, reads, writes) in enumerate(optimizer.kernels(precision)):
            out.append(Op(name=f"{prefix}.{layer}.{i}", kind=ir.ELEMENTWISE,
                          target=f"{optimizer.name}:{name}", input_shapes=((n,),),
                          output_shapes=((n,),), dtype=precision.optimizer_states,
                          bytes_per_element=int(precision.bytes_of("optimizer_states")),
                          flops=int(flops * n), activation_bytes_read=int(round(reads * n)),
                          activation_bytes_written=int(round(writes * n)),
                          attrs={"elements": n, "pass": OPT, "layer": layer,
                                 "optimizer": optimizer.name, "impl": optimizer.impl}))
    return out


# ------------------------------------------------------------------------------ recompute
def attention_core(w: Workload) -> set[str]:
    """Forward ops of the blocks' eager attention cores (the score matmul of two activations,
    what follows it up to the softmax, and what follows the softmax up to the matmul with V):
    what selective recomputation runs again."""
    g = w.graph
    layers = layers_of(w)[1]
    core: set[str] = set()

    def fwd(n):
        return g.nodes[n]["op"].attrs.get("pass") == FWD
    for name in g.nodes:
        op = g.nodes[name]["op"]
        if op.kind != ir.SOFTMAX or not fwd(name) or not 0 <= op.attrs.get("layer", -1) < layers:
            continue
        chain = _back_to_scores(g, name, fwd)
        if chain is None:
            continue
        cur = name
        for _ in range(8):        # forward to the matmul with V
            succ = [s for s in g.successors(cur) if fwd(s)]
            if len(succ) != 1 or g.nodes[succ[0]]["op"].kind not in (ir.ELEMENTWISE,
                                                                      ir.DATA_MOVEMENT):
                break
            cur = succ[0]
            chain.append(cur)
        core.update(chain)
    return core


def _back_to_scores(g, softmax: str, fwd, depth: int = 8) -> list[str] | None:
    """``[softmax, ..., Q K^T]``: the ops from the softmax back to the score matmul through
    element-wise and data-movement ops (a scale, a mask), breadth first; None without one."""
    seen = {softmax: None}
    frontier = [softmax]
    for _ in range(depth):
        nxt = []
        for node in frontier:
            for p in g.predecessors(node):
                if p in seen or not fwd(p):
                    continue
                op = g.nodes[p]["op"]
                if _activation_matmul(op) or op.kind in (ir.ELEMENTWISE, ir.DATA_MOVEMENT):
                    seen[p] = node
                    if _activation_matmul(op):
                        chain = [p]
                        while seen[chain[-1]] is not None:
                            chain.append(seen[chain[-1]])
                        return chain
                    nxt.append(p)
        frontier = nxt
    return None


def recomputed(w: Workload, mode: str) -> set[str]:
    """Names of the forward ops ``mode`` runs again before their block's backward."""
    if mode not in RECOMPUTE_MODES:
        raise BadInput("recompute", mode, "expected one of " + ", ".join(RECOMPUTE_MODES))
    if mode == "none":
        return set()
    if mode == "selective":
        return attention_core(w)
    layers = layers_of(w)[1]
    return {op.name for op in w.ops if op.attrs.get("pass") == FWD
            and 0 <= int(op.attrs.get("layer", -1)) < layers}


def saved_bytes(w: Workload, mode: str = "none", layer: int | None = None,
                scale: dict[str, float] | None = None) -> float:
    """Activation bytes kept from the forward for the backward of one micro-batch (of block
    ``layer`` of the model, or all), under recompute ``mode``: what is not recomputed keeps
    its saved tensors, and ``full`` also keeps every tensor a recomputed block reads from
    outside it (its input: Megatron's checkpointed layer input). ``scale``: the share of
    each producer's output one device holds (a parallel split's), 1 by default."""
    if layer is None:
        return sum(_saved(w, mode, src, scale) * n for src, n in layer_multiplicity(w).items())
    return _saved(w, mode, source_layer(w, layer), scale)


def _saved(w: Workload, mode: str, layer: int, scale: dict[str, float] | None) -> float:
    """:func:`saved_bytes` of captured block ``layer``."""
    share = scale or {}
    again = recomputed(w, mode)
    g = w.graph
    total = 0.0
    for op in w.ops:
        if op.attrs.get("pass") != FWD or op.name in again:
            continue
        if layer is None or op.attrs.get("layer") == layer:
            total += op.attrs.get("saved_bytes", 0) * share.get(op.name, 1.0)
    if mode == "full":   # what a recomputed block reads from outside, or leaves to others
        for op in w.ops:
            if op.attrs.get("pass") != FWD or (op.name not in again
                                               and op.attrs.get("saved_bytes")):
                continue
            kept = [g.edges[op.name, s].get("bytes", 0) for s in g.successors(op.name)
                    if g.nodes[s]["op"].attrs.get("layer") != op.attrs.get("layer")
                    and (s in again or g.nodes[s]["op"].attrs.get("pass") == BWD)
                    and (layer is None or g.nodes[s]["op"].attrs.get("layer") == layer)]
            if kept:
                total += max(kept) * share.get(op.name, 1.0)
    return total


def with_recompute(w: Workload, mode: str) -> Workload:
    """``w`` with the recomputed forward ops copied (pass ``recompute``, name ``op~rc``)
    before their block's backward: each copy reads what its original read (or that input's
    copy), the block's backward ops read the copies, and the copies of block ``l`` start
    after the backward of the block after it."""
    again = recomputed(w, mode)
    if not again:
        return w
    g = w.graph
    ops: list[Op] = []
    edges: list[tuple[str, str, float]] = []
    last_bwd: dict[int, str] = {}
    for op in w.ops:
        if op.attrs.get("pass") == BWD:
            last_bwd[int(op.attrs.get("layer", -1))] = op.name
    copies: dict[int, list[Op]] = {}
    for op in w.ops:
        if op.name in again:
            copies.setdefault(int(op.attrs.get("layer", -1)), []).append(
                Op(**{**_fields(op), "name": op.name + "~rc",
                      "attrs": {**op.attrs, "pass": RECOMPUTE, "of": op.name}}))
    inserted: set[int] = set()
    layers = sorted(copies)
    for op in w.ops:
        layer = int(op.attrs.get("layer", -1))
        if op.attrs.get("pass") == BWD and layer in copies and layer not in inserted:
            ops.extend(copies[layer])
            inserted.add(layer)
        ops.append(op)
    for u, v, d in g.edges(data=True):
        b = d.get("bytes", 0)
        vop = g.nodes[v]["op"]
        if u in again and vop.attrs.get("pass") == BWD and \
                vop.attrs.get("layer") == g.nodes[u]["op"].attrs.get("layer"):
            edges.append((u + "~rc", v, b))      # its block's backward reads the copy
        else:
            edges.append((u, v, b))
        if v in again:     # the copy reads what the original read (its block's: the copy)
            same = u in again and g.nodes[u]["op"].attrs.get("layer") == vop.attrs.get("layer")
            edges.append((u + "~rc" if same else u, v + "~rc", b))
    for layer in layers:           # after the backward of the block before it in backward
        later = [l2 for l2 in last_bwd if l2 > layer]
        if later:
            edges.append((last_bwd[min(later)], copies[layer][0].name, 0.0))
    return _rebuild(w, ops, edges)


def _fields(op: Op) -> dict[str, Any]:
    from dataclasses import fields as dc_fields
    return {f.name: getattr(op, f.name) for f in dc_fields(Op)}


def _rebuild(w: Workload, ops: list[Op], edges, batch: int | None = None) -> Workload:
    graph = nx.DiGraph()
    graph.add_nodes_from((op.name, {"op": op, "index": i}) for i, op in enumerate(ops))
    graph.add_edges_from((a, b, {"bytes": nb}) for a, b, nb in edges)
    out = Workload(graph=graph, model=w.model, phase=w.phase, dtype=w.dtype,
                   batch=w.batch if batch is None else batch, seq=w.seq, context=w.context,
                   arch=dict(w.arch), params=w.params, unknown_targets=dict(w.unknown_targets),
                   free_ops=w.free_ops, train=dict(w.train))
    out.__dict__["ops"] = list(ops)
    return out


# ------------------------------------------------------------------------------ the step
@dataclass(frozen=True)
class StepSpec:
    """How one training step runs on one device: ``microbatches`` forward-backward passes
    (gradient accumulation), ``recompute`` mode, ``precision``, ``optimizer``, and
    ``accumulate`` (``add``: an add kernel per block's gradients per extra micro-batch, as
    PyTorch's autograd accumulates ``.grad``; ``fused``: the weight-gradient GEMM accumulates
    in place, Megatron's gradient-accumulation fusion)."""

    microbatches: int = 1
    recompute: str = "none"
    precision: Precision = field(default_factory=lambda: PRECISIONS["mixed"])
    optimizer: Optimizer = field(default_factory=Optimizer)
    accumulate: str = "add"

    def __post_init__(self) -> None:
        if isinstance(self.microbatches, bool) or not isinstance(self.microbatches, int) \
                or not 1 <= self.microbatches <= 1 << 20:
            raise BadInput("microbatches", self.microbatches, "expected an int in [1, 1048576]")
        if self.recompute not in RECOMPUTE_MODES:
            raise BadInput("recompute", self.recompute,
                           "expected one of " + ", ".join(RECOMPUTE_MODES))
        if self.accumulate not in ("add", "fused"):
            raise BadInput("accumulate", self.accumulate, "expected add or fused")


def step_workload(joint: Workload, spec: StepSpec | None = None) -> Workload:
    """The whole step on one device as one graph: ``microbatches`` copies of the joint graph
    (with recompute), one after another (names ``op@k``), gradient accumulation adds, then
    the optimizer (``opt.*`` ops after every backward). Its FLOPs are the model's FLOPs x
    micro-batches + recompute + optimizer."""
    spec = spec or StepSpec()
    if joint.phase != "train":
        raise BadInput("phase", joint.phase, "expected a training step's joint graph (train)")
    if layers_of(joint)[0] != layers_of(joint)[1]:
        raise BadInput("workload", joint.model, "a full capture (this one holds the first "
                       f"{layers_of(joint)[1]} of {layers_of(joint)[0]} blocks)")
    base = with_recompute(joint, spec.recompute)
    m = spec.microbatches
    ops: list[Op] = []
    edges: list[tuple[str, str, float]] = []
    sinks = [n for n in base.graph.nodes if base.graph.out_degree(n) == 0]
    sources = [n for n in base.graph.nodes if base.graph.in_degree(n) == 0]
    params = params_by_layer(joint)
    for k in range(m):
        name = (lambda n: f"{n}@{k}") if m > 1 else (lambda n: n)
        for op in base.ops:
            ops.append(Op(**{**_fields(op), "name": name(op.name)}))
        edges.extend((name(u), name(v), d.get("bytes", 0))
                     for u, v, d in base.graph.edges(data=True))
        if k:
            prev = (lambda n, j=k - 1: f"{n}@{j}")
            edges.extend((prev(s), name(t), 0.0) for s in sinks for t in sources)
            if spec.accumulate == "add":
                gb = spec.precision.bytes_of("gradients")
                for layer, n in sorted(params.items()):
                    acc = Op(name=f"grad_acc.{layer}@{k}", kind=ir.ELEMENTWISE, target="add_",
                             input_shapes=((n,), (n,)), output_shapes=((n,),),
                             dtype=spec.precision.gradients, bytes_per_element=int(gb),
                             flops=n, activation_bytes_read=int(2 * gb * n),
                             activation_bytes_written=int(gb * n),
                             attrs={"elements": n, "pass": "accumulate", "layer": layer})
                    ops.append(acc)
                    edges.extend((name(s), acc.name, 0.0) for s in sinks)
    opt = optimizer_ops(joint, spec.optimizer, spec.precision, params)
    finals = [f"{s}@{m - 1}" if m > 1 else s for s in sinks] + [
        op.name for op in ops if op.attrs.get("pass") == "accumulate"
        and op.name.endswith(f"@{m - 1}")]
    for op in opt:
        ops.append(op)
        edges.extend((f, op.name, 0.0) for f in finals)
    out = _rebuild(joint, ops, edges, batch=joint.batch * m)
    out.train = {**joint.train, "microbatches": m, "recompute": spec.recompute,
                 "precision": spec.precision.to_dict(), "optimizer": spec.optimizer.to_dict()}
    return out


def model_flops(joint: Workload) -> int:
    """FLOPs of one micro-batch's forward and backward, without recompute or optimizer (the
    numerator of MFU), over every block of the model."""
    mult = layer_multiplicity(joint)
    return sum(op.flops * mult.get(int(op.attrs.get("layer", 0)), 1) for op in joint.ops
               if op.attrs.get("pass") in (FWD, BWD))


def attention_causal_saving(joint: Workload) -> int:
    """FLOPs a causal attention kernel skips (counted in full, as torch does)."""
    return sum(op.flops - int(op.attrs.get("causal_flops", op.flops)) for op in joint.ops
               if op.kind == ir.ATTENTION and op.attrs.get("pass") in (FWD, BWD))


def params_total(joint: Workload) -> int:
    return sum(params_by_layer(joint).values())
