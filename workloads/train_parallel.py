"""Parallelism for training, as transforms of the joint forward-backward graph: the work one
device does for one micro-batch, block by block, and what it exchanges.

A :class:`TrainLayout` puts ``dp x pp x cp x tp`` devices on a model (rank order: tensor
parallel innermost, then context, pipeline, data parallel, as Megatron-LM numbers them):

* **tensor parallel** (``tp``) with optional **sequence parallelism** (``sp``): the Megatron
  split of :func:`workloads.parallel.tensor_parallel` applied to the joint graph, so the
  backward's matmuls are split by the same rules as the forward's (a weight gradient stays
  the rank's shard; partial input gradients are summed before one all-reduce, or
  reduce-scatter with ``sp``): two all-reduces per block forward and two backward.
* **context parallel** (``cp``): every rank holds ``seq / cp`` tokens of each sequence; its
  ops do ``1 / cp`` of the work (attention too: Megatron's load-balanced causal split), and
  each attention's keys and values are all-gathered in the forward and their gradients
  reduce-scattered in the backward (group ``cp``).
* **pipeline parallel** (``pp``, ``chunks`` per stage for the interleaved schedule): the
  blocks are cut into ``pp x chunks`` contiguous model chunks of equal block counts (the
  embedding with the first, the head and loss with the last, as Megatron does); chunk ``c``
  runs on stage ``c mod pp``. Between chunks each micro-batch's activation (forward) and its
  gradient (backward) are sent point to point. The schedule lives in
  :mod:`simulators.pipeline`.
* **data parallel** (``dp``) with **ZeRO** stage ``zero`` (Rajbhandari et al. 2020): 0 keeps
  everything on every replica (gradients all-reduced in buckets of ``bucket_mb`` overlapped
  with the backward, as DDP and Megatron do); 1 shards the optimizer states and master
  weights over ``dp`` (then all-gathers the updated weights); 2 also the gradients
  (reduce-scatter instead of all-reduce); 3 also the weights, all-gathered block by block
  before its forward and again before its backward (FSDP's ``FULL_SHARD`` with prefetch).
* **expert parallel** (``ep``): not modelled in training (the grouped expert op has no
  backward formula yet); ``ep > 1`` is infeasible with that reason.

Conservation: the FLOPs of every device of a layout add up to the model's (times
micro-batches) plus what tensor parallelism replicates plus recompute (tested), and every
parameter is in exactly one chunk and updated once per data-parallel shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dse.errors import BadInput, InfeasibleDesign
from workloads import ir
from workloads.ir import Op, Workload
from workloads.parallel import _div, _scaled, collective_op, tensor_parallel
from workloads.train_step import (RECOMPUTE, RECOMPUTE_MODES, _rebuild, model_flops,
                                  saved_bytes, with_recompute)
from workloads.training import BWD, FWD, layer_multiplicity, source_layer

SCHEDULES = ("1f1b", "interleaved", "gpipe")
OFFLOAD_TARGETS = ("none", "host", "nvme")


@dataclass(frozen=True)
class TrainLayout:
    """How a training step is split over devices (see the module docstring).

    ``micro_batch``: samples per micro-batch per data-parallel replica; ``global_batch``:
    samples per optimizer step (0: ``dp x micro_batch``, one micro-batch); the step runs
    ``global_batch / (dp x micro_batch)`` micro-batches (gradient accumulation).
    ``offload_optimizer`` / ``offload_params``: where optimizer states (with master weights
    and the update) / parameters live when not on the device (ZeRO-Offload, ZeRO-Infinity).
    """

    dp: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    sp: bool = False
    zero: int = 0
    micro_batch: int = 1
    global_batch: int = 0
    schedule: str = "1f1b"
    chunks: int = 1
    recompute: str = "none"
    bucket_mb: float = 25.0
    overlap_grad_reduce: bool = True
    offload_optimizer: str = "none"
    offload_params: str = "none"

    def __post_init__(self) -> None:
        for name in ("dp", "tp", "pp", "cp", "ep", "chunks", "micro_batch"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20:
                raise BadInput(f"parallel.{name}", v, "expected an int in [1, 1048576]")
        if isinstance(self.global_batch, bool) or not isinstance(self.global_batch, int) \
                or not 0 <= self.global_batch <= 1 << 30:
            raise BadInput("parallel.global_batch", self.global_batch,
                           "expected an int in [0, 2**30] (0: dp x micro_batch)")
        if isinstance(self.zero, bool) or self.zero not in (0, 1, 2, 3):
            raise BadInput("parallel.zero", self.zero, "expected a ZeRO stage 0, 1, 2 or 3")
        if self.schedule not in SCHEDULES:
            raise BadInput("parallel.schedule", self.schedule,
                           "expected one of " + ", ".join(SCHEDULES))
        if self.recompute not in RECOMPUTE_MODES:
            raise BadInput("parallel.recompute", self.recompute,
                           "expected one of " + ", ".join(RECOMPUTE_MODES))
        if self.schedule == "interleaved" and self.chunks < 2:
            raise BadInput("parallel.chunks", self.chunks, "expected at least 2 model chunks "
                           "per stage for the interleaved schedule")
        if self.schedule != "interleaved" and self.chunks != 1:
            raise BadInput("parallel.chunks", self.chunks, "expected 1 (chunks > 1 needs "
                           "schedule: interleaved)")
        if not (isinstance(self.bucket_mb, (int, float)) and 0 < self.bucket_mb <= 1e5):
            raise BadInput("parallel.bucket_mb", self.bucket_mb, "expected MB in (0, 1e5]")
        for name in ("offload_optimizer", "offload_params"):
            if getattr(self, name) not in OFFLOAD_TARGETS:
                raise BadInput(f"parallel.{name}", getattr(self, name),
                               "expected one of " + ", ".join(OFFLOAD_TARGETS))
        if self.offload_params != "none" and self.zero != 3:
            raise BadInput("parallel.offload_params", self.offload_params,
                           "expected none unless zero: 3 (ZeRO-Infinity offloads the "
                           "parameters of stage 3)")
        if self.global_batch and self.global_batch % (self.dp * self.micro_batch):
            raise BadInput("parallel.global_batch", self.global_batch,
                           f"expected a multiple of dp x micro_batch = "
                           f"{self.dp * self.micro_batch} (micro-batches must divide the batch)")

    @property
    def devices(self) -> int:
        return self.dp * self.pp * self.cp * self.tp

    @property
    def batch(self) -> int:
        """Samples per optimizer step."""
        return self.global_batch or self.dp * self.micro_batch

    @property
    def microbatches(self) -> int:
        return self.batch // (self.dp * self.micro_batch)

    def rank(self, dp: int = 0, pp: int = 0, cp: int = 0, tp: int = 0) -> int:
        return ((dp * self.pp + pp) * self.cp + cp) * self.tp + tp

    def group(self, kind: str, dp: int = 0, pp: int = 0, cp: int = 0, tp: int = 0) -> list[int]:
        """The ranks of one ``tp`` / ``cp`` / ``dp`` / ``dpcp`` (gradient reduction with
        context parallelism) group through the given coordinates."""
        if kind == "tp":
            return [self.rank(dp, pp, cp, t) for t in range(self.tp)]
        if kind == "cp":
            return [self.rank(dp, pp, c, tp) for c in range(self.cp)]
        if kind == "dp":
            return [self.rank(d, pp, cp, tp) for d in range(self.dp)]
        if kind == "dpcp":
            return [self.rank(d, pp, c, tp) for d in range(self.dp) for c in range(self.cp)]
        raise ValueError(kind)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


_ALIASES = {"sequence_parallel": "sp", "microbatch": "micro_batch", "mbs": "micro_batch",
            "gbs": "global_batch", "vpp": "chunks", "zero_stage": "zero"}


def train_layout_from(value: dict[str, Any] | TrainLayout | None, **defaults: Any) -> TrainLayout:
    """A :class:`TrainLayout` from a dict (aliases: ``sequence_parallel``, ``mbs``, ``gbs``,
    ``vpp``, ``zero_stage``; ``fsdp: true`` is ``zero: 3``); unknown keys are a BadInput."""
    if value is None:
        value = {}
    if isinstance(value, TrainLayout):
        return value
    if not isinstance(value, dict):
        raise BadInput("parallel", value, "expected a mapping like {dp: 8, tp: 2, pp: 1}")
    allowed = set(TrainLayout.__dataclass_fields__) | set(_ALIASES) | {"fsdp"}
    out = dict(defaults)
    for k, v in value.items():
        if k not in allowed:
            raise BadInput(f"parallel.{k}", v, "expected one of " + ", ".join(sorted(allowed)))
        if k == "fsdp":
            if v not in (True, False):
                raise BadInput("parallel.fsdp", v, "expected true or false")
            if v:
                out["zero"] = 3
            continue
        out[_ALIASES.get(k, k)] = v
    return TrainLayout(**out)


# ------------------------------------------------------------------------------ the plan
@dataclass
class Segment:
    """One block's ops of one pass on one device for one micro-batch: ``compute`` (a
    workload of the compute ops, in order) and ``collectives`` (kind, bytes, group) in
    program order; ``flops`` of the compute, ``recompute_flops`` of it re-run."""

    layer: int
    pass_: str
    compute: Workload
    collectives: list[tuple[str, float, str]]
    flops: int
    recompute_flops: int = 0


@dataclass
class TrainPlan:
    """What every device of a layout does for one step (see the module docstring)."""

    layout: TrainLayout
    joint: Workload                  # the model's joint graph (one micro-batch, one replica)
    device_graph: Workload           # one rank's graph: recompute, cp and tp applied
    layers: int
    chunks: list[list[int]]          # blocks of each model chunk, in model order
    segments: dict[tuple[int, str], Segment]   # by captured block (see segment())
    saved_bytes: dict[int, float]    # per block, per micro-batch, on one device
    params: dict[int, float]         # trainable elements per block on one device (tp split)
    p2p_bytes: float                 # activation bytes sent between chunks, per micro-batch
    replicated_flops: int            # one rank's work tensor parallelism does not split
    model_flops: int                 # FLOPs of the model's forward + backward, one micro-batch

    @property
    def microbatches(self) -> int:
        return self.layout.microbatches

    def segment(self, layer: int, pass_: str) -> Segment | None:
        """Block ``layer``'s ops of ``pass_`` (the captured block that stands for it)."""
        return self.segments.get((source_layer(self.joint, layer), pass_))

    def chunk_of(self, layer: int) -> int:
        for c, blocks in enumerate(self.chunks):
            if layer in blocks:
                return c
        raise KeyError(layer)

    def stage_of_chunk(self, chunk: int) -> int:
        return chunk % self.layout.pp

    def device_flops(self) -> int:
        """FLOPs one rank of each stage does per step, summed over the stages (one tensor-,
        context- and data-parallel rank)."""
        mult = layer_multiplicity(self.joint)
        return sum(s.flops * mult.get(layer, 1) for (layer, _), s in self.segments.items()) \
            * self.microbatches


def _chunk_blocks(layers: int, n: int) -> list[list[int]]:
    """``n`` contiguous chunks of the blocks ``0 .. layers-1`` (counts differing by at most
    one, the larger first); the first holds block -1, the last block ``layers``."""
    if n > max(layers, 1):
        raise InfeasibleDesign(f"{n} pipeline chunks for a model of {layers} blocks")
    sizes = [layers // n + (1 if i < layers % n else 0) for i in range(n)]
    out, start = [], 0
    for size in sizes:
        out.append(list(range(start, start + size)))
        start += size
    out[0].insert(0, -1)
    out[-1].append(layers)
    return out


def context_parallel(w: Workload, cp: int) -> Workload:
    """One of ``cp`` context-parallel ranks: every op does ``1 / cp`` of its work (a token
    split; attention's queries split with load-balanced causal halves), attention's K and V
    all-gathered in the forward and their gradients reduce-scattered in the backward."""
    if cp == 1:
        return w
    if not w.seq or w.seq % cp:
        raise InfeasibleDesign(f"context parallelism of {cp} needs a sequence length that "
                               f"divides (seq {w.seq})")
    ops: list[Op] = []
    edges: list[tuple[str, str, float]] = []
    g = w.graph
    renamed: dict[str, str] = {}
    for op in w.ops:
        a = dict(op.attrs)
        if "elements" in a:
            a["elements"] = _div(a["elements"], cp)
        if op.kind == ir.MATMUL and "m" in a and a.get("batch", 1) == 1:
            a["m"] = _div(a["m"], cp)
        if op.kind == ir.ATTENTION:
            a["q_len"] = _div(a["q_len"], cp)
            a["causal_flops"] = _div(a.get("causal_flops", op.flops), cp)
        new = _scaled(op, cp, a, dim=0, weights=False)
        if op.kind == ir.ATTENTION:
            kv = (op.activation_bytes_read // 2) if op.activation_bytes_read else 0
            kind = "all_gather" if op.attrs.get("pass") == FWD else "reduce_scatter"
            coll = collective_op(f"{kind}.kv.{op.name}", kind, kv, "cp",
                                 **{"pass": op.attrs.get("pass"), "layer": op.attrs.get("layer")})
            ops.append(coll)
            for p in g.predecessors(op.name):
                edges.append((p, coll.name, g.edges[p, op.name].get("bytes", 0) / cp))
            edges.append((coll.name, op.name, kv))
            renamed[op.name] = coll.name
        ops.append(new)
    for u, v, d in g.edges(data=True):
        if v in renamed:
            continue
        edges.append((u, v, d.get("bytes", 0) / cp))
    out = _rebuild(w, ops, edges)
    out.seq = w.seq // cp
    return out


def _label_collectives(w: Workload) -> Workload:
    """Give every collective the pass and block of the op that feeds it."""
    g = w.graph
    bare = [op for op in w.ops if op.kind == ir.COLLECTIVE and "pass" not in op.attrs]
    for op in bare:
        preds = list(g.predecessors(op.name))
        src = g.nodes[preds[0]]["op"].attrs if preds else {}
        g.nodes[op.name]["op"] = op.with_attrs(**{"pass": src.get("pass", FWD),
                                                  "layer": src.get("layer", 0)})
    if bare:
        w.__dict__.pop("ops", None)
    return w


def _segment_workload(w: Workload, names: list[str]) -> Workload:
    keep = set(names)
    g = w.graph
    ops = [g.nodes[n]["op"] for n in names]
    edges = [(u, v, d.get("bytes", 0)) for u, v, d in g.subgraph(keep).edges(data=True)]
    out = _rebuild(w, ops, edges)
    # the view ops capture dropped, in this segment's share (the eager runtime charges each
    # op its share of them; the whole model's views on every block multiplied them)
    share = len(ops) / max(len(w.ops), 1)
    out.free_ops = tuple((k, c * share) for k, c in w.free_ops)
    return out


def plan_training(joint: Workload, layout: TrainLayout) -> TrainPlan:
    """Split the joint graph of one micro-batch (captured at ``batch = micro_batch``) over
    ``layout``; :class:`InfeasibleDesign` when it cannot be (heads, tokens or blocks that do
    not divide)."""
    if joint.phase != "train":
        raise BadInput("phase", joint.phase, "expected a training step's joint graph (train)")
    if layout.ep > 1:
        raise InfeasibleDesign("expert parallelism in training is not modelled (the grouped "
                               "expert op has no backward formula)")
    layers = int(joint.train.get("layers", 0))
    if layout.pp * layout.chunks > 1 and layout.pp * layout.chunks > max(layers, 1):
        raise BadInput("parallel.pp", layout.pp, f"expected pp x chunks <= the model's "
                       f"{layers} blocks")
    if joint.batch != layout.micro_batch:
        raise BadInput("parallel.micro_batch", layout.micro_batch,
                       f"the joint graph was captured at batch {joint.batch}")
    splits = joint.__dict__.setdefault("_train_plans", {})
    key = (layout.tp, layout.cp, layout.sp, layout.recompute)
    device = splits.get(key)
    if device is None:
        g = with_recompute(joint, layout.recompute)
        g = context_parallel(g, layout.cp)
        g, replicated = tensor_parallel(g, layout.tp, layout.sp, uneven="replicate",
                                        vocab_parallel=True)
        g = _label_collectives(g)
        g.train = dict(joint.train)
        device = splits[key] = (g, replicated)
    g, replicated = device
    by_name = {op.name: op for op in g.ops}
    segments: dict[tuple[int, str], Segment] = {}
    grouped: dict[tuple[int, str], list[str]] = {}
    for op in g.ops:
        p = op.attrs.get("pass", BWD)
        key2 = (int(op.attrs.get("layer", 0)), FWD if p == FWD else BWD)
        grouped.setdefault(key2, []).append(op.name)
    for (layer, p), names in grouped.items():
        compute = [n for n in names if by_name[n].kind != ir.COLLECTIVE]
        colls = [(by_name[n].attrs["collective"], float(by_name[n].attrs["bytes"]),
                  by_name[n].attrs["group"]) for n in names if by_name[n].kind == ir.COLLECTIVE]
        sub = _segment_workload(g, compute)
        segments[(layer, p)] = Segment(
            layer, p, sub, colls, sum(by_name[n].flops for n in compute),
            sum(by_name[n].flops for n in compute
                if by_name[n].attrs.get("pass") == RECOMPUTE))
    # parameters per block on one tp rank: each first-use op's share after the split
    captured: dict[int, float] = {}
    for op in joint.ops:
        e = op.attrs.get("param_elems")
        if not e or op.attrs.get("pass") != FWD:
            continue
        new = by_name.get(op.name)
        share = (new.weight_bytes / op.weight_bytes) if (new is not None and op.weight_bytes) \
            else 1.0
        layer = int(op.attrs.get("layer", 0))
        captured[layer] = captured.get(layer, 0.0) + float(e) * share
    params = {layer: captured[source_layer(joint, layer)] for layer in range(-1, layers + 1)
              if source_layer(joint, layer) in captured}
    share = {op.name: by_name[op.name].activation_bytes_written / op.activation_bytes_written
             for op in joint.ops if op.name in by_name and op.activation_bytes_written}
    by_source: dict[int, float] = {}
    for layer in range(-1, layers + 1):
        src = source_layer(joint, layer)
        if src not in by_source:
            by_source[src] = saved_bytes(joint, layout.recompute, layer, share)
    saved = {layer: by_source[source_layer(joint, layer)] for layer in range(-1, layers + 1)}
    hidden = _boundary_bytes(joint, layers)
    p2p = hidden / layout.cp / (layout.tp if layout.sp else 1)
    return TrainPlan(layout=layout, joint=joint, device_graph=g, layers=layers,
                     chunks=_chunk_blocks(layers, layout.pp * layout.chunks),
                     segments=segments, saved_bytes=saved, params=params, p2p_bytes=p2p,
                     replicated_flops=sum(
                         by_name[n].flops * layer_multiplicity(joint).get(
                             int(by_name[n].attrs.get("layer", 0)), 1)
                         for n in replicated if n in by_name),
                     model_flops=model_flops(joint))


def _boundary_bytes(w: Workload, layers: int) -> float:
    """Bytes of the activation passed from one block to the next (the largest tensor on an
    edge from block 0 into block 1), or from the blocks into the head."""
    g = w.graph
    best = 0.0
    src_layer, dst_layer = (0, 1) if layers > 1 else (0, layers)
    for u, v, d in g.edges(data=True):
        a, b = g.nodes[u]["op"].attrs, g.nodes[v]["op"].attrs
        if a.get("pass") == FWD and b.get("pass") == FWD and a.get("layer") == src_layer \
                and b.get("layer") == dst_layer:
            best = max(best, float(d.get("bytes", 0)))
    return best


def workspace_bytes(w: Workload) -> float:
    """Peak bytes of the transient tensors of one micro-batch (produced and freed within the
    step, not kept across the forward-backward boundary; parameter gradients excluded):
    a liveness walk over the ops in order, each output live from its op to its last
    consumer."""
    ops = w.ops
    pos = {op.name: i for i, op in enumerate(ops)}
    g = w.graph
    free_at: dict[int, float] = {}
    live = peak = 0.0
    for i, op in enumerate(ops):
        if op.kind == ir.COLLECTIVE:
            continue
        succ = [pos[s] for s in g.successors(op.name)]
        out = float(op.activation_bytes_written)
        crosses = op.attrs.get("pass") == FWD and any(
            g.nodes[s]["op"].attrs.get("pass") != FWD for s in g.successors(op.name))
        if succ and not crosses:
            live += out
            last = max(succ)
            free_at[last] = free_at.get(last, 0.0) + out
        peak = max(peak, live)
        live -= free_at.pop(i, 0.0)
    return peak


def params_per_device(plan: TrainPlan, chunk_ids: list[int]) -> float:
    """Trainable parameter elements of the given chunks on one tp rank."""
    return sum(plan.params.get(layer, 0.0) for c in chunk_ids for layer in plan.chunks[c])


def conservation(plan: TrainPlan) -> dict[str, int]:
    """The FLOPs of one step summed over every device (``devices``) and what they are made
    of: the model's forward + backward x micro-batches x replicas (``model``), recompute
    (``recompute``) and the work tensor parallelism runs on every rank (``tp_replicated``).
    ``devices == model + recompute + tp_replicated`` (exactly where ``cp`` divides every
    op's work; tested)."""
    lay, m = plan.layout, plan.microbatches
    mult = layer_multiplicity(plan.joint)
    rc = sum(op.flops * mult.get(int(op.attrs.get("layer", 0)), 1)
             for op in with_recompute(plan.joint, lay.recompute).ops
             if op.attrs.get("pass") == RECOMPUTE)
    return {"devices": plan.device_flops() * lay.tp * lay.cp * lay.dp,
            "model": plan.model_flops * m * lay.dp, "recompute": rc * m * lay.dp,
            "tp_replicated": plan.replicated_flops * lay.cp * (lay.tp - 1) * m * lay.dp}
