"""Parallelism as graph transforms: one workload in, per-device workloads and the collectives
between them out. Shape arithmetic only: nothing here knows hardware.

A :class:`Layout` splits a workload over ``dp x pp x ep x tp`` devices (rank order: tensor
parallel innermost, then expert, pipeline, data parallel, as Megatron-LM numbers ranks):

* **Data parallel** (``dp``): replicas, each with ``batch / dp`` of the batch; no collective
  (inference has no gradients).
* **Pipeline parallel** (``pp``): the op graph cut into ``pp`` contiguous stages of about equal
  FLOPs, each cut placed where the fewest bytes cross it (a layer boundary); tensors that
  cross a cut are sent with ``send_recv``. ``microbatches`` copies of each stage's graph, each
  with ``batch / microbatches``, run back to back on the stage (GPipe).
* **Tensor parallel** (``tp``, Megatron-LM, Shoeybi et al. 2019): a weight matmul that feeds
  another weight matmul or an attention op (through element-wise work) is split by columns,
  the matmul that consumes split activations by rows, attention by heads; the row-parallel
  output is a partial sum, all-reduced before the next op that needs it whole. A column split
  whose output leaves the graph (the LM head) is all-gathered. Everything else runs
  replicated on every rank (its FLOPs are reported as ``replicated``). With
  ``sequence_parallel`` (Korthikanti et al. 2022) the replicated regions are split by tokens
  instead: the all-reduce becomes a reduce-scatter, and the input of a column-parallel matmul
  is all-gathered.
* **Expert parallel** (``ep``): ops of kind ``moe`` (attrs ``experts``, ``top_k``, ``tokens``;
  optionally ``tokens_per_expert`` and ``touch_probability`` per expert) hold ``experts / ep``
  experts per device; tokens reach their experts by an ``all_to_all`` (dispatch) and come back
  by another (combine). The rest of the model runs data parallel over the ``ep`` ranks
  (``batch / ep`` each). Expert load: from ``tokens_per_expert`` (experts dealt round-robin)
  or else ``ep_imbalance``, the hottest rank's load over the mean.

Collectives are ops of kind :data:`COLLECTIVE` with no FLOPs and no memory bytes: their
``attrs`` hold ``collective`` (the kind), ``bytes`` (nccl-tests' size), ``group`` (``tp``,
``ep`` or ``pp``) and, for ``send_recv``, ``src_stage`` / ``dst_stage``. A send/recv appears
in both stages' graphs under one name. Devices whose graphs are the same object are
identical (:attr:`ParallelWorkload.representative`), which the simulator exploits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Iterable

import networkx as nx

from dse.errors import BadInput, InfeasibleDesign
from workloads import ir
from workloads.ir import Op, Workload
from workloads.patterns import _activation_matmul

COLLECTIVE = ir.COLLECTIVE
MOE = ir.MOE
#: Kinds through which a tensor-parallel split passes unchanged (per-head or element-wise).
_PASS_THROUGH = (ir.ELEMENTWISE, ir.DATA_MOVEMENT, ir.SOFTMAX, ir.ATTENTION, COLLECTIVE)
#: Input states each tensor-parallel mode of an op takes as they are (R replicated, S split,
#: P partial sums, T split by tokens); others are converted by a collective first.
_ACCEPTS = {"row": ("S", "R"), "split": ("S", "R"), "heads": ("S", "R"), "column": ("R",),
            "moe": ("R",), "tokens": ("T", "R"), "replicated": ("R",),
            "pass": ("R", "S", "P", "T"), "partial": ("P",), "vocab": ("R",),
            "vocab_grad": ("R",)}
#: Element-wise ops that are linear in every input: partial sums added stay partial (a
#: training step's backward adds the input gradients of several row-split matmuls).
_LINEAR_TARGETS = ("add", "add_", "sub", "sub_")


@dataclass(frozen=True)
class Layout:
    """How a workload is split: ``tp``, ``pp``, ``ep``, ``dp`` ways; ``sequence_parallel``;
    ``microbatches`` per pipeline iteration (0: ``pp`` when the batch splits so, else 1);
    ``ep_imbalance``: the hottest expert-parallel rank's load over the mean (1 = uniform)."""

    tp: int = 1
    pp: int = 1
    ep: int = 1
    dp: int = 1
    sequence_parallel: bool = False
    microbatches: int = 0
    ep_imbalance: float = 1.0

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "ep", "dp"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 4096:
                raise BadInput(f"parallel.{name}", v, "expected an int in [1, 4096]")
        if isinstance(self.microbatches, bool) or not isinstance(self.microbatches, int) \
                or not 0 <= self.microbatches <= 4096:
            raise BadInput("parallel.microbatches", self.microbatches,
                           "expected an int in [0, 4096] (0: pp when the batch splits so)")
        if not (isinstance(self.ep_imbalance, (int, float)) and math.isfinite(self.ep_imbalance)
                and 1.0 <= self.ep_imbalance <= max(self.ep, 1)):
            raise BadInput("parallel.ep_imbalance", self.ep_imbalance,
                           f"expected a number in [1, ep={self.ep}] (hottest rank's load over "
                           "the mean)")

    @property
    def devices(self) -> int:
        return self.dp * self.pp * self.ep * self.tp

    def rank(self, dp: int = 0, pp: int = 0, ep: int = 0, tp: int = 0) -> int:
        return ((dp * self.pp + pp) * self.ep + ep) * self.tp + tp

    def coords(self, rank: int) -> tuple[int, int, int, int]:
        """(dp, pp, ep, tp) coordinates of device ``rank``."""
        tp = rank % self.tp
        rank //= self.tp
        ep = rank % self.ep
        rank //= self.ep
        return rank // self.pp, rank % self.pp, ep, tp

    def group(self, op: Op, rank: int) -> tuple[int, ...]:
        """The devices a collective op of device ``rank`` runs among."""
        dp, pp, ep, tp = self.coords(rank)
        g = op.attrs["group"]
        if g == "tp":
            return tuple(self.rank(dp, pp, ep, t) for t in range(self.tp))
        if g == "ep":
            return tuple(self.rank(dp, pp, e, tp) for e in range(self.ep))
        if g == "pp":
            return (self.rank(dp, op.attrs["src_stage"], ep, tp),
                    self.rank(dp, op.attrs["dst_stage"], ep, tp))
        raise ValueError(f"unknown group {g!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "ep": self.ep, "dp": self.dp,
                "sequence_parallel": self.sequence_parallel, "microbatches": self.microbatches,
                "ep_imbalance": self.ep_imbalance}


def layout_from(parallel: dict[str, Any] | Layout | None) -> Layout:
    """A :class:`Layout` from a dict (``{"tp": 2, "sp": True, ...}``); unknown keys are a
    :class:`BadInput`."""
    if parallel is None:
        return Layout()
    if isinstance(parallel, Layout):
        return parallel
    if not isinstance(parallel, dict):
        raise BadInput("parallel", parallel, "expected a mapping like {tp: 2, pp: 1}")
    aliases = {"sp": "sequence_parallel"}
    allowed = ("tp", "pp", "ep", "dp", "sequence_parallel", "sp", "microbatches", "ep_imbalance")
    values = {}
    for k, v in parallel.items():
        if k not in allowed:
            raise BadInput(f"parallel.{k}", v, "expected one of " + ", ".join(allowed))
        values[aliases.get(k, k)] = v
    return Layout(**values)


@dataclass
class ParallelWorkload:
    """The per-device workloads of a layout. ``graphs[rank]`` is device ``rank``'s workload
    (identical devices share one object; ``representative[rank]`` is the lowest rank with the
    same graph); ``microbatches`` each stage runs; ``replicated_flops`` and
    ``replicated_params`` per device: work and weights every tensor-parallel (or
    expert-parallel) rank holds in full."""

    source: Workload
    layout: Layout
    graphs: list[Workload]
    representative: list[int]
    microbatches: int
    replicated_flops: list[int] = field(default_factory=list)
    replicated_params: list[int] = field(default_factory=list)

    @property
    def devices(self) -> int:
        return len(self.graphs)

    def flops(self) -> int:
        """FLOPs summed over every device."""
        return sum(g.flops for g in self.graphs)

    def communication_bytes(self) -> dict[str, float]:
        """Bytes of each collective kind summed over the ops of every device (nccl-tests'
        sizes; a send/recv counted once)."""
        out: dict[str, float] = {}
        for rank, g in enumerate(self.graphs):
            for op in g.ops:
                if op.kind != COLLECTIVE:
                    continue
                a = op.attrs
                if a["collective"] == "send_recv" and self.layout.coords(rank)[1] != a["src_stage"]:
                    continue
                out[a["collective"]] = out.get(a["collective"], 0.0) + a["bytes"]
        return out

    def summary(self) -> dict[str, Any]:
        return {"layout": self.layout.to_dict(), "devices": self.devices,
                "microbatches": self.microbatches, "flops": self.flops(),
                "source_flops": self.source.flops,
                "replicated_flops": sum(self.replicated_flops),
                "params_per_device": [g.params for g in self.graphs],
                "communication_bytes": self.communication_bytes()}


# ------------------------------------------------------------------------------ helpers
_OP_FIELDS = tuple(f.name for f in fields(Op))


def replace(op: Op, **changes: Any) -> Op:
    """``dataclasses.replace`` for :class:`Op`, without its per-call validation (a hot path:
    every op of every device graph goes through it)."""
    return Op(*[changes[f] if f in changes else getattr(op, f) for f in _OP_FIELDS])


def collective_op(name: str, kind: str, nbytes: float, group: str, **attrs: Any) -> Op:
    """A collective op: no FLOPs, no memory bytes (communication is reported apart)."""
    return Op(name=name, kind=COLLECTIVE, target=kind, input_shapes=(), output_shapes=(),
              dtype="", bytes_per_element=0,
              attrs={"collective": kind, "bytes": float(nbytes), "group": group, **attrs})


def _div(value: int, parts: int) -> int:
    """``value / parts`` rounded up (exact when it divides)."""
    return -(-int(value) // parts)


def _with_dim(shape: tuple, dim: int, parts: int) -> tuple:
    if not shape or not -len(shape) <= dim < len(shape) or shape[dim] % parts:
        return shape
    s = list(shape)
    s[dim] //= parts
    return tuple(s)


def resident_weights(op: Op) -> int:
    """Parameter elements an op keeps in memory: an embedding's whole table (its reads are
    a few rows), a moe op's every expert, else the weights it reads."""
    if op.kind == ir.EMBEDDING and op.input_shapes and op.input_shapes[0]:
        return math.prod(op.input_shapes[0])
    if op.kind == MOE and op.attrs.get("params_per_expert") and op.attrs.get("experts"):
        return int(op.attrs["params_per_expert"]) * int(op.attrs["experts"])
    if "formats" in op.attrs:   # weight bytes in a number format (workloads.formats)
        from workloads.formats import weight_elements
        return weight_elements(op)
    return op.weight_bytes // max(op.bytes_per_element, 1)


def _rebuild(source: Workload, ops: list[Op], edges: Iterable[tuple[str, str, float]],
             params: int, batch: int | None = None) -> Workload:
    """A workload of ``ops``, already in a topological order (the transforms build them so:
    every op after its producers), and ``edges`` (producer, consumer, bytes)."""
    graph = nx.DiGraph()
    graph.add_nodes_from((op.name, {"op": op, "index": i}) for i, op in enumerate(ops))
    graph.add_edges_from((a, b, {"bytes": nbytes}) for a, b, nbytes in edges)
    w = Workload(graph=graph, model=source.model, phase=source.phase, dtype=source.dtype,
                 batch=source.batch if batch is None else batch, seq=source.seq,
                 context=source.context, arch=dict(source.arch), params=int(params),
                 unknown_targets=dict(source.unknown_targets))
    w.__dict__["ops"] = list(ops)          # the cached_property, without sorting again
    return w


# ------------------------------------------------------------------------------ batch split
def _batch_carrying(op: Op, batch: int) -> bool:
    shapes = op.output_shapes or op.input_shapes
    return bool(shapes and shapes[0] and shapes[0][0] >= batch and shapes[0][0] % batch == 0)


def _scale_moe(op: Op, parts: int) -> Op:
    """A moe op with ``1/parts`` of its tokens: FLOPs and activations scale; experts touched
    (and so weight bytes) follow ``1 - (1 - pick)^tokens``."""
    a = dict(op.attrs)
    tokens = int(a.get("tokens") or 0)
    new_tokens = max(1, tokens // parts) if tokens else 0
    weight = op.weight_bytes
    if a.get("tokens_per_expert") and tokens:
        pick = [t / tokens for t in a["tokens_per_expert"]]
        touched = [1 - (1 - min(p, 1.0)) ** new_tokens for p in pick]
        old = sum(a.get("touch_probability") or [1.0] * len(pick)) or 1.0
        weight = int(round(op.weight_bytes * sum(touched) / old))
        a["tokens_per_expert"] = [t / parts for t in a["tokens_per_expert"]]
        a["touch_probability"] = touched
        a["experts_touched"] = sum(touched)
    if tokens:
        a["tokens"] = new_tokens
    return _scaled(op, parts, a, dim=0, weight_bytes=weight)


def _scale_op(op: Op, batch: int, parts: int) -> Op:
    """``op`` on ``1/parts`` of the batch (ops that do not carry the batch are unchanged)."""
    if op.kind == COLLECTIVE or parts == 1:
        return op
    if op.kind == MOE:
        return _scale_moe(op, parts)
    if not _batch_carrying(op, batch):
        return op
    a = dict(op.attrs)
    if op.kind == ir.MATMUL:
        if int(a.get("batch", 1)) >= batch and int(a.get("batch", 1)) % batch == 0:
            a["batch"] = _div(a["batch"], parts)
        elif "m" in a:
            a["m"] = _div(a["m"], parts)
    elif op.kind == ir.ATTENTION and "batch" in a:
        a["batch"] = _div(a["batch"], parts)
    elif op.kind == ir.CONV and "n" in a:
        a["n"] = _div(a["n"], parts)
    if "elements" in a:
        a["elements"] = _div(a["elements"], parts)
    return _scaled(op, parts, a, dim=0, weights=op.kind == ir.EMBEDDING)


def _scaled(op: Op, parts: int, attrs: dict, dim: int, weights: bool = False,
            weight_bytes: int | None = None) -> Op:
    """``op`` doing ``1/parts`` of its work: FLOPs, activation and KV bytes divided, its
    first input's and its outputs' dimension ``dim`` divided; its weight bytes divided when
    ``weights`` (or set to ``weight_bytes``), else kept."""
    if weight_bytes is None:
        weight_bytes = _div(op.weight_bytes, parts) if weights else op.weight_bytes
    return replace(op, flops=_div(op.flops, parts), weight_bytes=weight_bytes,
                   activation_bytes_read=_div(op.activation_bytes_read, parts),
                   activation_bytes_written=_div(op.activation_bytes_written, parts),
                   kv_bytes_read=_div(op.kv_bytes_read, parts),
                   kv_bytes_written=_div(op.kv_bytes_written, parts),
                   input_shapes=tuple(_with_dim(s, dim, parts) for s in op.input_shapes[:1])
                   + op.input_shapes[1:],
                   output_shapes=tuple(_with_dim(s, dim, parts) for s in op.output_shapes),
                   attrs=attrs)


def split_batch(workload: Workload, parts: int, keep: Iterable[str] = ()) -> Workload:
    """``workload`` on ``batch / parts`` of its batch: every op that carries the batch (its
    leading dimension a multiple of it) does ``1/parts`` of its work; ops in ``keep`` are left
    whole. The batch must divide."""
    if parts == 1:
        return workload
    if workload.batch % parts:
        raise InfeasibleDesign(f"the batch of {workload.batch} does not split into {parts} "
                               "equal parts (data / expert parallel ranks x microbatches)")
    keep = set(keep)
    b = workload.batch
    ops, scale_of = [], {}
    for op in workload.ops:
        new = op if op.name in keep else _scale_op(op, b, parts)
        ops.append(new)
        scale_of[op.name] = (new.activation_bytes_written / op.activation_bytes_written
                             if op.activation_bytes_written else 1.0)
    edges = [(u, v, d.get("bytes", 0) * scale_of[u]) for u, v, d in workload.graph.edges(data=True)]
    return _rebuild(workload, ops, edges, workload.params, batch=b // parts)


# ------------------------------------------------------------------------------ pipeline cut
def pipeline_stages(workload: Workload, pp: int) -> dict[str, int]:
    """Stage of every op: ``pp`` contiguous runs of the topological order of about equal
    FLOPs; each cut, among the positions within a quarter stage of its equal-FLOP target, is
    where the fewest bytes cross (a layer boundary), ties to the closest."""
    ops = workload.ops
    if pp == 1:
        return {op.name: 0 for op in ops}
    if pp > len(ops):
        raise InfeasibleDesign(f"{pp} pipeline stages for {len(ops)} ops")
    pos = {op.name: i for i, op in enumerate(ops)}
    graph = workload.graph
    # bytes alive across the cut before position c: producers < c with a consumer >= c
    delta = [0.0] * (len(ops) + 1)
    for i, op in enumerate(ops):
        last, out = i, 0.0
        for s in graph.successors(op.name):
            last = max(last, pos[s])
            out = max(out, float(graph.edges[op.name, s].get("bytes", 0)))
        if last > i:
            delta[i + 1] += out
            delta[last + 1] -= out
    crossing, alive = [0.0] * (len(ops) + 1), 0.0
    for c in range(len(ops) + 1):
        alive += delta[c]
        crossing[c] = alive
    prefix = [0]
    for op in ops:
        prefix.append(prefix[-1] + op.flops + 1)       # +1: ops without FLOPs still count
    total = prefix[-1]
    cuts, prev = [], 0
    for j in range(1, pp):
        target = j * total / pp
        lo = prev + 1
        hi = len(ops) - (pp - j)
        window = [c for c in range(lo, hi + 1) if abs(prefix[c] - target) <= total / (4 * pp)]
        if not window:
            window = [min(range(lo, hi + 1), key=lambda c: abs(prefix[c] - target))]
        best = min(window, key=lambda c: (crossing[c], abs(prefix[c] - target)))
        cuts.append(best)
        prev = best
    stage, out = 0, {}
    for i, op in enumerate(ops):
        while stage < len(cuts) and i >= cuts[stage]:
            stage += 1
        out[op.name] = stage
    return out


# ------------------------------------------------------------------------------ tensor parallel
class _TensorParallel:
    """The Megatron split of one graph over ``tp`` ranks (see the module docstring)."""

    def __init__(self, workload: Workload, tp: int, sequence_parallel: bool,
                 uneven: str = "raise", vocab_parallel: bool = False):
        self.w, self.tp, self.sp, self.uneven = workload, tp, sequence_parallel, uneven
        self.vocab = vocab_parallel
        self.graph = workload.graph
        self.ops: list[Op] = []
        self.edges: list[tuple[str, str, float]] = []
        self.state: dict[str, str] = {}      # R replicated, S split, P partial sum, T tokens
        self.out_bytes: dict[str, float] = {}
        self.replicated: set[str] = set()      # ops every rank runs in full
        self.split_params_removed = 0
        self._fixed: dict[tuple[str, str], str] = {}   # (producer, wanted state) -> op name
        for op in workload.ops:
            if op.kind == ir.ATTENTION:
                heads = int(op.attrs.get("heads", 0))
                kv = int(op.attrs.get("kv_heads") or heads)
                if heads % tp or kv % tp:
                    raise InfeasibleDesign(
                        f"tensor parallelism of {tp} does not divide the {heads} attention "
                        f"heads" + (f" and {kv} key/value heads" if kv != heads else "")
                        + f" of {op.name}")
        self._column = self._column_candidates()

    # which weight matmuls are column-parallel
    def _column_candidates(self) -> set[str]:
        """Weight matmuls whose output, through per-head / element-wise ops only, reaches
        another weight matmul or an attention op, or leaves the graph (an LM head). One that
        the ranks cannot split evenly is infeasible (the LM head is then replicated)."""
        graph, ops = self.graph, self.w.ops
        reaches: dict[str, bool] = {}     # the op's output reaches a weight matmul / attention
        for op in reversed(ops):
            hit = False
            for succ in graph.successors(op.name):
                nxt = graph.nodes[succ]["op"]
                if nxt.kind == ir.ATTENTION or (nxt.kind == ir.MATMUL
                                                and nxt.attrs.get("weight_operand")):
                    hit = True
                elif (nxt.kind in _PASS_THROUGH or _activation_matmul(nxt)) and reaches[succ]:
                    hit = True   # per-head work: eager attention's score and value products
                if hit:
                    break
            reaches[op.name] = hit
        out = set()
        for op in ops:
            if not (op.kind == ir.MATMUL and op.attrs.get("weight_operand")):
                continue
            n = int(op.attrs.get("n", 0))
            if graph.out_degree(op.name) == 0:
                if n and n % self.tp == 0:
                    out.add(op.name)
            elif reaches[op.name]:
                if (not n or n % self.tp) and self.uneven == "replicate":
                    continue                  # run whole on every rank (an unpadded vocab)
                if not n or n % self.tp:
                    raise InfeasibleDesign(f"tensor parallelism of {self.tp} does not divide "
                                           f"the {n} output features of {op.name}")
                out.add(op.name)
        return out

    # collectives that change a tensor's state
    def _convert(self, producer: str, want: str) -> str:
        """Name of the op that holds ``producer``'s output in state ``want`` (R or T),
        inserting a collective when needed: a partial sum is all-reduced (R) or
        reduce-scattered (T); a split tensor is all-gathered (R, which a token split then
        slices locally)."""
        have = self.state[producer]
        if have == "P":
            kind = "all_reduce" if want == "R" else "reduce_scatter"
            out_state = want
        else:
            kind, out_state = "all_gather", "R"
        key = (producer, kind)
        if key in self._fixed:
            return self._fixed[key]
        full = self.out_bytes[producer] * (self.tp if have in ("S", "T") else 1)
        name = f"{kind}.{producer}"
        self.ops.append(collective_op(name, kind, full, "tp"))
        self.edges.append((producer, name, self.out_bytes[producer]))
        self.state[name] = out_state
        self.out_bytes[name] = full / (self.tp if out_state == "T" else 1)
        self._fixed[key] = name
        return name

    def _mode(self, op: Op, states: list[str]) -> str:
        weight_mm = op.kind == ir.MATMUL and op.attrs.get("weight_operand")
        if op.kind == COLLECTIVE:
            return "pass"
        if weight_mm and "S" in states:
            return "row"
        if weight_mm and op.name in self._column:
            return "column"
        if op.kind == MOE:
            return "moe"
        if self.vocab and _vocab_rows(op) and _vocab_rows(op) % self.tp == 0:
            return "vocab_grad" if op.target == "embedding_dense_backward" else "vocab"
        if op.kind == ir.ELEMENTWISE and op.target in _LINEAR_TARGETS and len(states) > 1 \
                and all(st == "P" for st in states) and op.attrs.get("pass") == "bwd":
            return "partial"   # input gradients of several row-split matmuls, summed
        if "S" in states:
            return "heads" if op.kind == ir.ATTENTION else "split"
        return "tokens" if self.sp else "replicated"

    def run(self) -> Workload:
        for op in self.w.ops:
            preds = list(self.graph.predecessors(op.name))
            mode = self._mode(op, [self.state[p] for p in preds])
            accepts = _ACCEPTS[mode]
            target = "T" if mode == "tokens" else "R"
            sources = [p if self.state[p] in accepts else self._convert(p, target)
                       for p in preds]
            new, out_state = self._split(op, mode)
            if mode == "pass":
                out_state = self.state[sources[0]] if sources else "R"
            self.ops.append(new)
            for p, src in zip(preds, sources):
                self.edges.append((src, op.name, self._edge_bytes(p, src, op.name)))
            self.state[op.name] = out_state
            self.out_bytes[op.name] = (float(new.activation_bytes_written) if mode != "pass"
                                       else self.out_bytes[sources[0]] if sources else 0.0)
            if out_state == "S" and self.graph.out_degree(op.name) == 0 \
                    and op.attrs.get("pass") != "bwd":   # a weight gradient stays a shard
                self._convert(op.name, "R")          # the LM head's logits, gathered
        return _rebuild(self.w, self.ops, self.edges, self.w.params - self.split_params_removed)

    def _edge_bytes(self, producer: str, source: str, consumer: str) -> float:
        """Bytes on the edge into ``consumer``: a collective's output, or the source edge's
        bytes scaled as its producer's output was."""
        if source != producer:
            return self.out_bytes[source]
        old = float(self.graph.edges[producer, consumer].get("bytes", 0))
        written = self.graph.nodes[producer]["op"].activation_bytes_written
        return old * self.out_bytes[producer] / written if written else old

    def _split(self, op: Op, mode: str) -> tuple[Op, str]:
        tp = self.tp
        a = dict(op.attrs)
        if mode == "pass":
            return op, "R"
        if mode == "replicated":
            self.replicated.add(op.name)
            return op, "R"
        if mode == "partial":     # partial sums added on every rank: still partial
            self.replicated.add(op.name)
            return op, "P"
        if mode == "vocab":       # a vocab-parallel embedding: rows of this rank, zeros else
            table = op.input_shapes[0]
            self.split_params_removed += resident_weights(op) * (tp - 1) // tp
            return replace(op, weight_bytes=_div(op.weight_bytes, tp),
                           input_shapes=((table[0] // tp,) + tuple(table[1:]),)
                           + op.input_shapes[1:], attrs=a), "P"
        if mode == "vocab_grad":  # the gradient of this rank's rows of the table
            return replace(op, activation_bytes_written=_div(op.activation_bytes_written, tp),
                           output_shapes=tuple(_with_dim(s, 0, tp) for s in op.output_shapes),
                           attrs=a), "S"
        if mode == "column":
            a["n"] = int(a["n"]) // tp
            self.split_params_removed += resident_weights(op) * (tp - 1) // tp
            return replace(op, flops=_div(op.flops, tp), weight_bytes=_div(op.weight_bytes, tp),
                           activation_bytes_written=_div(op.activation_bytes_written, tp),
                           output_shapes=tuple(_with_dim(s, -1, tp) for s in op.output_shapes),
                           attrs=a), "S"
        if mode == "row":
            if "k" in a:
                a["k"] = _div(a["k"], tp)
            self.split_params_removed += resident_weights(op) * (tp - 1) // tp
            return replace(op, flops=_div(op.flops, tp), weight_bytes=_div(op.weight_bytes, tp),
                           activation_bytes_read=_div(op.activation_bytes_read, tp),
                           input_shapes=tuple(_with_dim(s, -1, tp) for s in op.input_shapes[:1])
                           + op.input_shapes[1:], attrs=a), "P"
        if mode == "moe":    # every expert's GEMMs split like a dense MLP
            self.split_params_removed += resident_weights(op) * (tp - 1) // tp
            return replace(op, flops=_div(op.flops, tp), weight_bytes=_div(op.weight_bytes, tp),
                           attrs={**a, "tp": tp}), "P"
        if mode == "heads":
            heads, kv = int(a.get("heads", 0)), int(a.get("kv_heads") or a.get("heads", 0))
            a["heads"], a["kv_heads"] = heads // tp, kv // tp
            if "causal_flops" in a:
                a["causal_flops"] = _div(a["causal_flops"], tp)
            return _scaled(op, tp, a, dim=1), "S"
        if mode == "split":
            if "elements" in a:
                a["elements"] = _div(a["elements"], tp)
            if op.kind == ir.MATMUL and "n" in a:   # keep the GEMM's shape with its FLOPs:
                b, n = int(a.get("batch", 1)), int(a["n"])   # split heads (batch) or columns
                if b > 1 and b % tp == 0:
                    a["batch"] = b // tp
                elif n % tp == 0:
                    a["n"] = n // tp
                else:
                    a["m"] = _div(a["m"], tp)
            return _scaled(op, tp, a, dim=1 if len(_first(op)) == 4 else -1), "S"
        # tokens (sequence parallel)
        if op.kind == ir.MATMUL and "m" in a:
            a["m"] = _div(a["m"], tp)
        if "elements" in a:
            a["elements"] = _div(a["elements"], tp)
        return _scaled(op, tp, a, dim=0, weights=op.kind == ir.EMBEDDING), "T"


def _vocab_rows(op: Op) -> int:
    """Rows of the table of an embedding lookup (or of its gradient), 0 for other ops."""
    if op.kind == ir.EMBEDDING and op.weight_bytes and op.input_shapes and op.input_shapes[0]:
        return int(op.input_shapes[0][0])
    if op.target == "embedding_dense_backward" and op.output_shapes and op.output_shapes[0]:
        return int(op.output_shapes[0][0])
    return 0


def _first(op: Op) -> tuple:
    shapes = op.output_shapes or op.input_shapes
    return shapes[0] if shapes else ()


def tensor_parallel(workload: Workload, tp: int, sequence_parallel: bool = False,
                    uneven: str = "raise", vocab_parallel: bool = False
                    ) -> tuple[Workload, set[str]]:
    """The graph one of ``tp`` tensor-parallel ranks runs (all ranks run the same graph) and
    the ops every rank computes in full. ``uneven``: what a weight matmul whose output
    features ``tp`` does not divide does: ``raise`` (:class:`InfeasibleDesign`) or
    ``replicate`` (it runs whole on every rank, as an unpadded vocabulary's head).
    ``vocab_parallel``: embedding tables are split by rows (Megatron's vocab-parallel
    embedding: each rank looks up its rows, the partial sums all-reduced; its gradient is
    the rank's rows)."""
    if tp == 1:
        return workload, set()
    tokens = workload.batch * max(workload.seq, 1) if workload.phase != "decode" else workload.batch
    if sequence_parallel and tokens % tp:
        raise InfeasibleDesign(f"sequence parallelism splits the {tokens} tokens of a step over "
                               f"tp={tp} ranks: they must divide")
    t = _TensorParallel(workload, tp, sequence_parallel, uneven, vocab_parallel)
    out = t.run()
    return out, t.replicated


# ------------------------------------------------------------------------------ expert parallel
def _expert_share(op: Op, ep: int, rank: int, imbalance: float) -> tuple[float, float, dict]:
    """(share of the routed assignments, share of the weights, attrs) of rank ``rank``."""
    a = dict(op.attrs)
    experts = int(a.get("experts", 0))
    if not experts or experts % ep:
        raise InfeasibleDesign(f"expert parallelism of {ep} does not divide the {experts} "
                               f"experts of {op.name}")
    a["experts"] = experts // ep
    per = a.get("tokens_per_expert")
    if per:
        mine = [i for i in range(experts) if i % ep == rank]
        touch = a.get("touch_probability") or [1.0] * experts
        share = sum(per[i] for i in mine) / (sum(per) or 1.0)
        wshare = sum(touch[i] for i in mine) / (sum(touch) or 1.0)
        a["tokens_per_expert"] = [per[i] for i in mine]
        a["touch_probability"] = [touch[i] for i in mine]
        a["experts_touched"] = sum(a["touch_probability"])
        return share, wshare, a
    hot = imbalance / ep
    share = hot if rank == 0 else (1 - hot) / (ep - 1)
    return share, 1 / ep, a


def _expert_parallel(group: Workload, local: Workload, ep: int, rank: int,
                     imbalance: float) -> Workload:
    """``local`` (the rank's ``1/ep`` of the batch) with each moe op taken from ``group``
    (the whole expert-parallel group's batch) and cut to this rank's experts, between a
    dispatch and a combine all-to-all."""
    ops, edges = [], []
    graph = local.graph
    removed = 0
    group_ops = {op.name: op for op in group.ops if op.kind == MOE}
    renamed: dict[str, str] = {}
    for op in local.ops:
        if op.kind != MOE:
            ops.append(op)
            continue
        g = group_ops[op.name]
        share, wshare, attrs = _expert_share(g, ep, rank, imbalance)
        new = replace(g, flops=int(round(g.flops * share)),
                      weight_bytes=int(round(g.weight_bytes * wshare)),
                      activation_bytes_read=int(round(g.activation_bytes_read * share)),
                      activation_bytes_written=int(round(g.activation_bytes_written * share)),
                      attrs=attrs)
        removed += resident_weights(g) - resident_weights(new)
        hidden = int(_first(op)[-1]) if _first(op) else 0
        top_k = int(g.attrs.get("top_k") or 1)
        tokens_local = int(g.attrs.get("tokens") or (
            math.prod(_first(g)[:-1]) if _first(g) else 0)) // ep
        nbytes = tokens_local * top_k * hidden * max(op.bytes_per_element, 1)
        dispatch = collective_op(f"all_to_all.dispatch.{op.name}", "all_to_all", nbytes, "ep")
        combine = collective_op(f"all_to_all.combine.{op.name}", "all_to_all", nbytes, "ep")
        ops.extend([dispatch, new, combine])
        for p in graph.predecessors(op.name):
            edges.append((p, dispatch.name, graph.edges[p, op.name].get("bytes", 0)))
        edges.append((dispatch.name, op.name, nbytes))
        edges.append((op.name, combine.name, nbytes))
        renamed[op.name] = combine.name
    for u, v, d in graph.edges(data=True):
        if graph.nodes[v]["op"].kind == MOE:
            continue
        edges.append((renamed.get(u, u), v, d.get("bytes", 0)))
    return _rebuild(local, ops, edges, local.params - removed)


# ------------------------------------------------------------------------------ pipeline
def _stage_graphs(workload: Workload, stage_of: dict[str, int], pp: int,
                  microbatches: int) -> list[Workload]:
    """Each stage's graph: its ops ``microbatches`` times (``name@k``), microbatch ``k+1``
    after ``k``, and a ``send_recv`` per tensor crossing into a later stage (in both stages'
    graphs)."""
    if pp == 1 and microbatches == 1:
        return [workload]
    graph = workload.graph
    suffix = (lambda n, k: f"{n}@{k}") if microbatches > 1 else (lambda n, k: n)
    stage_ops: list[list[Op]] = [[] for _ in range(pp)]
    stage_edges: list[list[tuple[str, str, float]]] = [[] for _ in range(pp)]
    resident = [0] * pp
    for op in workload.ops:
        resident[stage_of[op.name]] += resident_weights(op)
    for k in range(microbatches):
        sends: dict[tuple[str, int], str] = {}
        for op in workload.ops:
            s = stage_of[op.name]
            for p in graph.predecessors(op.name):
                sp = stage_of[p]
                nbytes = float(graph.edges[p, op.name].get("bytes", 0))
                if sp == s:
                    stage_edges[s].append((suffix(p, k), suffix(op.name, k), nbytes))
                    continue
                key = (p, s)
                if key not in sends:
                    name = suffix(f"send_recv.{p}.s{sp}-s{s}", k)
                    coll = collective_op(name, "send_recv", nbytes, "pp", src_stage=sp,
                                         dst_stage=s, microbatch=k)
                    stage_ops[sp].append(coll)
                    stage_ops[s].append(coll)
                    stage_edges[sp].append((suffix(p, k), name, nbytes))
                    sends[key] = name
                stage_edges[s].append((sends[key], suffix(op.name, k), nbytes))
            stage_ops[s].append(replace(op, name=suffix(op.name, k)))
    if microbatches > 1:   # GPipe order: microbatch k+1 starts on a stage after k finished
        for s in range(pp):
            names = [op.name for op in stage_ops[s] if op.kind != COLLECTIVE]
            by_k: dict[int, list[str]] = {}
            for n in names:
                by_k.setdefault(int(n.rsplit("@", 1)[1]), []).append(n)
            compute = set(names)
            local = {(u, v) for u, v, _ in stage_edges[s] if u in compute and v in compute}
            has_succ = {u for u, _ in local}
            has_pred = {v for _, v in local}
            for k in range(1, microbatches):
                prev, cur = by_k.get(k - 1, []), by_k.get(k, [])
                sinks = [n for n in prev if n not in has_succ]
                sources = [n for n in cur if n not in has_pred]
                for a in sinks:
                    for b in sources:
                        stage_edges[s].append((a, b, 0.0))
    params = _apportion(workload.params, resident)
    return [_rebuild(workload, stage_ops[s], stage_edges[s], params[s],
                     batch=workload.batch * microbatches) for s in range(pp)]


def _apportion(total: int, weights: list[int]) -> list[int]:
    """``total`` split in proportion to ``weights`` in integers that sum to it exactly
    (largest remainders)."""
    if len(weights) == 1:
        return [total]
    w = sum(weights) or len(weights)
    raw = [total * (x if sum(weights) else 1) / w for x in weights]
    out = [int(math.floor(r)) for r in raw]
    for i in sorted(range(len(raw)), key=lambda i: out[i] - raw[i])[: total - sum(out)]:
        out[i] += 1
    return out


# ------------------------------------------------------------------------------ the transform
#: Architecture keys that count a model's repeated layers (zoo, Hugging Face names).
LAYER_KEYS = ("n_layer", "num_hidden_layers", "n_layers", "num_layers")


def layer_count(workload: Workload) -> int | None:
    """The layers ``workload``'s architecture declares, or None when it names none."""
    for key in LAYER_KEYS:
        v = (workload.arch or {}).get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return None


def check_layout_for(workload: Workload, layout: Layout) -> None:
    """A layout the model can take: no more pipeline stages than it has layers (a stage holds
    one layer or more); :class:`BadInput` naming ``parallel.pp`` otherwise."""
    layers = layer_count(workload)
    if layers is not None and layout.pp > layers:
        raise BadInput("parallel.pp", layout.pp, f"expected at most {layers} pipeline stages: "
                       f"{workload.model} has {layers} layers (a stage holds one or more)")


def parallelize(workload: Workload, layout: Layout | dict | None) -> ParallelWorkload:
    """Split ``workload`` over the devices of ``layout`` (see the module docstring), once per
    workload and layout (workloads are not changed once built; a search simulates one split
    on many systems). :class:`InfeasibleDesign` when the layout cannot split it (heads,
    experts or the batch do not divide)."""
    layout = layout_from(layout)
    check_layout_for(workload, layout)
    splits = workload.__dict__.setdefault("_splits", {})   # lives and dies with the workload
    pw = splits.get(layout)
    if pw is None:
        pw = splits[layout] = _parallelize(workload, layout)
    return pw


def _parallelize(workload: Workload, layout: Layout) -> ParallelWorkload:
    tp, pp, ep, dp = layout.tp, layout.pp, layout.ep, layout.dp
    m = layout.microbatches
    if m == 0:
        m = pp if pp > 1 and workload.batch % (dp * ep * pp) == 0 else 1
    moe_ops = [op.name for op in workload.ops if op.kind == MOE]
    if ep > 1 and not moe_ops:
        raise InfeasibleDesign(f"expert parallelism (ep={ep}) needs a mixture-of-experts "
                               f"model; {workload.model} has no moe ops")
    for name in moe_ops if ep > 1 else ():
        experts = int(workload.graph.nodes[name]["op"].attrs.get("experts") or 0)
        if not experts or experts % ep:
            raise InfeasibleDesign(f"expert parallelism of {ep} does not divide the {experts} "
                                   f"experts of {name}")
    if workload.batch % (dp * ep * m):
        raise InfeasibleDesign(f"the batch of {workload.batch} does not split over dp={dp} x "
                               f"ep={ep} x {m} microbatches")
    stage_of = pipeline_stages(workload, pp)
    group = split_batch(workload, dp * m)                       # one microbatch of one replica
    listed = any(workload.graph.nodes[n]["op"].attrs.get("tokens_per_expert") for n in moe_ops)
    if ep == 1 or (not listed and layout.ep_imbalance == 1.0):
        classes = [0]                          # every expert-parallel rank alike
    elif not listed:
        classes = [0, 1]                       # the hottest rank, and the others alike
    else:
        classes = list(range(ep))
    per_class: dict[int, tuple[list[Workload], list[int], list[int]]] = {}
    for e in classes:
        g = group
        if ep > 1:
            local = split_batch(group, ep, keep=moe_ops)
            g = _expert_parallel(group, local, ep, e, layout.ep_imbalance)
        g, replicated = tensor_parallel(g, tp, layout.sequence_parallel)
        stage_map = {op.name: _stage_for(op, stage_of, g) for op in g.ops}
        stages = _stage_graphs(g, stage_map, pp, m)
        rflops, rparams = [0] * pp, [0] * pp
        for op in g.ops:
            if op.name in replicated:
                rflops[stage_map[op.name]] += op.flops * m
            whole = op.name in replicated or _holds_whole(op)    # on every tp rank
            if (tp > 1 and whole) or (ep > 1 and op.kind != MOE):   # on every ep rank
                rparams[stage_map[op.name]] += resident_weights(op)
        per_class[e] = (stages, rflops, rparams)
    graphs, rflops, rparams = [], [], []
    for rank in range(layout.devices):
        _, s, e, _ = layout.coords(rank)
        stages, rf, rp = per_class[e if e in per_class else max(c for c in per_class if c <= e)]
        graphs.append(stages[s])
        rflops.append(rf[s])
        rparams.append(rp[s])
    rep_of = []
    for rank in range(layout.devices):   # the lowest rank running the same graph object
        rep_of.append(next(r for r in range(rank + 1) if graphs[r] is graphs[rank]))
    return ParallelWorkload(workload, layout, graphs, rep_of, m, rflops, rparams)


def _holds_whole(op: Op) -> bool:
    """Whether every tensor-parallel rank keeps ``op``'s weights whole: ops that are not
    split by weights (norms, embeddings, buffers of split element-wise ops)."""
    return op.kind not in (ir.MATMUL, MOE, COLLECTIVE) and resident_weights(op) > 0 and \
        op.kind != ir.ATTENTION


def _stage_for(op: Op, stage_of: dict[str, int], graph: Workload) -> int:
    """The stage of an op of the transformed graph: its own, or (a collective inserted
    after a producer) its producer's."""
    name = op.name
    while name not in stage_of:
        preds = list(graph.graph.predecessors(name))
        if not preds:
            return 0
        name = preds[0]
    return stage_of[name]
