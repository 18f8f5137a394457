"""The workload IR: a networkx ``DiGraph`` of :class:`Op` nodes.

Node key: the op's unique name; node attribute ``op``: the :class:`Op`.
Edge attribute ``bytes``: the size in bytes of the tensor passed from producer to consumer.

FLOPs follow ``torch.utils.flop_counter``: 2 per multiply-accumulate, and causal attention
counted in full (the work a causal kernel really does is in ``attrs["causal_flops"]``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from typing import Any, Iterator

import networkx as nx

#: Op kinds. Everything the capture cannot classify becomes ``unknown`` (counted, never dropped).
MATMUL = "matmul"
CONV = "conv"
ATTENTION = "attention"
ELEMENTWISE = "elementwise"
NORM = "norm"
SOFTMAX = "softmax"
REDUCTION = "reduction"
EMBEDDING = "embedding"
HASHGRID = "hashgrid"
MOE = "moe"
SCAN = "scan"
RECURRENT = "recurrent"
DATA_MOVEMENT = "data_movement"
UNKNOWN = "unknown"
#: Host-side work a template adds when it plans a workload (a framework dispatching an op, a
#: graph launch); never produced by capture.
HOST = "host"
SPARSE_ATTENTION = "sparse_attention"
#: Communication between devices that a parallel layout inserts (:mod:`workloads.parallel`);
#: never produced by capture.
COLLECTIVE = "collective"
OP_KINDS = (MATMUL, CONV, ATTENTION, ELEMENTWISE, NORM, SOFTMAX, REDUCTION, EMBEDDING,
            HASHGRID, MOE, SCAN, RECURRENT, DATA_MOVEMENT, UNKNOWN, HOST, SPARSE_ATTENTION,
            COLLECTIVE)
#: Kinds a template costs as the sum of simpler parts (``workloads.composite.parts``).
COMPOSITE_KINDS = (MOE, SCAN, RECURRENT)

#: How a decode step updates the KV cache: ``in_place`` writes the new token's keys and values
#: into a preallocated cache (serving engines, Hugging Face's static cache); ``concat`` builds a
#: new cache tensor each step, reading and writing the whole cache (``torch.cat``: Hugging
#: Face's default dynamic cache).
KV_UPDATES = ("in_place", "concat")

#: Bytes per element of each supported dtype.
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}

#: ``train``: a training step's joint forward-backward graph (``workloads/training.py``).
PHASES = ("forward", "prefill", "decode", "train")

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Op:
    """One operator of a workload.

    Bytes are what the op reads and writes if nothing is cached on chip (its compulsory
    traffic at the op boundary). Weights are parameters; KV cache is the attention cache of an
    LLM decode step; everything else is activations.

    Kind-specific ``attrs``:
      * matmul: ``m``, ``n``, ``k``, ``batch`` (C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]);
        ``weight_operand`` True when B is a parameter.
      * conv: ``n, c, h, w, k, r, s, p, q, stride, padding, groups`` (input NCHW, k filters of
        r x s, output p x q); ``gemm_m, gemm_n, gemm_k`` its im2col GEMM per group.
      * attention: ``batch, heads, kv_heads, q_len, kv_len, head_dim, causal, causal_flops``.
      * sparse_attention: the attention keys plus ``dense_flops``, ``attended_pairs`` and the
        pattern (``gna`` or a captured ``block_mask``); FLOPs count attended pairs only
        (:mod:`workloads.sparse_attention`).
      * hashgrid: ``points, levels, features, log2_table_size, base_resolution,
        finest_resolution, dims``.
      * moe: the routed experts of one mixture-of-experts layer as a grouped matmul (see
        ``workloads/moe.py``): ``experts, top_k, tokens, gemms`` ([n, k] per expert GEMM, in
        order), ``tokens_per_expert`` (expected tokens each expert processes),
        ``experts_touched`` (expected distinct experts whose weights are read),
        ``capacity_factor``, ``capacity``, ``dropped_tokens``, ``imbalance``,
        ``params_per_expert``, ``weight_bytes_per_expert``.
      * scan: Mamba's selective scan: ``batch, channels, seq, state`` (and ``groups``).
      * recurrent: an LSTM/GRU/RNN: ``mode, batch, steps, input_size, hidden, layers,
        directions, gates``.
      * elementwise/norm/softmax/reduction/embedding/data_movement: ``elements`` (output).
    """

    name: str
    kind: str
    target: str
    input_shapes: tuple[Shape, ...]
    output_shapes: tuple[Shape, ...]
    dtype: str
    bytes_per_element: int
    flops: int = 0
    weight_bytes: int = 0
    activation_bytes_read: int = 0
    activation_bytes_written: int = 0
    kv_bytes_read: int = 0
    kv_bytes_written: int = 0
    attrs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def bytes_read(self) -> int:
        """All bytes read, B."""
        return self.weight_bytes + self.activation_bytes_read + self.kv_bytes_read

    @property
    def bytes_written(self) -> int:
        """All bytes written, B."""
        return self.activation_bytes_written + self.kv_bytes_written

    @property
    def total_bytes(self) -> int:
        """Bytes read plus written, B."""
        return self.bytes_read + self.bytes_written

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per byte of compulsory traffic."""
        return self.flops / self.total_bytes if self.total_bytes else float("inf")

    def with_attrs(self, **attrs: Any) -> "Op":
        return replace(self, attrs={**self.attrs, **attrs})


#: :class:`Op`'s fields in declaration order; :func:`renamed_copies` sets each by name, so a
#: field added to ``Op`` must be added there too (checked on import).
_OP_FIELDS = ("name", "kind", "target", "input_shapes", "output_shapes", "dtype",
              "bytes_per_element", "flops", "weight_bytes", "activation_bytes_read",
              "activation_bytes_written", "kv_bytes_read", "kv_bytes_written", "attrs")
if tuple(f.name for f in fields(Op)) != _OP_FIELDS or Op.__slots__ != _OP_FIELDS:
    raise ImportError("workloads.ir: Op's fields changed; update _OP_FIELDS and renamed_copies")


class _OpSlots:
    """:class:`Op`'s slot layout without its frozen ``__setattr__``. :func:`renamed_copies`
    fills one with plain attribute stores and then makes it an ``Op`` by ``__class__``
    assignment, which CPython allows only between classes of the same slot layout (it raises
    ``TypeError`` otherwise, never builds a broken object)."""

    __slots__ = _OP_FIELDS


def kv_row_elements(attrs: dict) -> int:
    """Elements one cached token holds per KV head of an attention op: its key and value
    (``head_dim + value_dim``), or only the key row when the values are a prefix of it
    (``kv_shared``: MLA over its latent cache, :mod:`workloads.mla_op`)."""
    d = int(attrs["head_dim"])
    return d if attrs.get("kv_shared") else d + int(attrs.get("value_dim") or d)


def renamed_copies(protos: list[Op], names: list[str], which: list[int]) -> list[Op]:
    """``[dataclasses.replace(protos[u], name=n) for n, u in zip(names, which)]``: each copy
    equal to its prototype but for the name and sharing its ``attrs`` dict, as ``replace``
    does. About 6x faster than the frozen dataclass's ``__init__`` (14
    ``object.__setattr__`` calls an op), which dominated building a 30-layer model's ~800 ops
    (:mod:`workloads.reshape`); nothing is validated, as ``Op.__init__`` validates nothing
    either."""
    rows = [(p.kind, p.target, p.input_shapes, p.output_shapes, p.dtype, p.bytes_per_element,
             p.flops, p.weight_bytes, p.activation_bytes_read, p.activation_bytes_written,
             p.kv_bytes_read, p.kv_bytes_written, p.attrs) for p in protos]
    new, slots, op_cls = object.__new__, _OpSlots, Op
    out: list[Op] = []
    append = out.append
    for name, u in zip(names, which):
        kind, target, ins, outs, dtype, elem, flops, w, ar, aw, kr, kw, attrs = rows[u]
        o = new(slots)
        o.name = name
        o.kind = kind
        o.target = target
        o.input_shapes = ins
        o.output_shapes = outs
        o.dtype = dtype
        o.bytes_per_element = elem
        o.flops = flops
        o.weight_bytes = w
        o.activation_bytes_read = ar
        o.activation_bytes_written = aw
        o.kv_bytes_read = kr
        o.kv_bytes_written = kw
        o.attrs = attrs
        o.__class__ = op_cls
        append(o)
    return out


@dataclass
class Workload:
    """A captured model: its op graph plus what it was captured with.

    ``params`` is the number of unique parameters (tied weights counted once), and
    ``weight_footprint_bytes`` = ``params`` x bytes per element. ``kv_update`` is the KV-cache
    update the append ops are costed with (:data:`KV_UPDATES`); ``free_ops`` counts the view
    ops capture dropped, ``(ATen name, count)`` pairs (no bytes move, but an eager framework
    dispatches each).
    """

    graph: nx.DiGraph
    model: str
    phase: str
    dtype: str
    batch: int = 1
    seq: int = 0
    context: int = 0
    arch: dict[str, Any] = field(default_factory=dict)
    params: int = 0
    unknown_targets: dict[str, int] = field(default_factory=dict)
    kv_update: str = "in_place"
    free_ops: tuple[tuple[str, int], ...] = ()
    #: A training step's facts beyond its ops (``workloads/training.py``: blocks, loss,
    #: parameters per block); empty for inference phases.
    train: dict[str, Any] = field(default_factory=dict)

    @cached_property
    def ops(self) -> list[Op]:
        """Ops in a deterministic topological order."""
        return [self.graph.nodes[n]["op"] for n in nx.lexicographical_topological_sort(
            self.graph, key=lambda n: self.graph.nodes[n]["index"])]

    def __iter__(self) -> Iterator[Op]:
        return iter(self.ops)

    def __len__(self) -> int:
        return self.graph.number_of_nodes()

    def predecessors(self, name: str) -> list[str]:
        return list(self.graph.predecessors(name))

    @property
    def bytes_per_element(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def weight_footprint_bytes(self) -> int:
        """Bytes of all parameters stored once, B (each in its role's format when the
        workload has formats: :func:`workloads.formats.weights_bytes`)."""
        from workloads.formats import has_formats, weights_bytes
        if has_formats(self):
            return int(math.ceil(weights_bytes(self)))
        return self.params * self.bytes_per_element

    @cached_property
    def flops(self) -> int:
        return sum(op.flops for op in self.ops)

    @property
    def unknown_ops(self) -> dict[str, int]:
        """ATen targets the capture could not classify, with their counts (costed by their
        bytes only: their FLOPs are missing)."""
        return dict(self.unknown_targets)

    @property
    def active_params(self) -> int:
        """Parameters one token uses: ``params`` less the routed experts it does not pick
        (``experts - top_k`` per mixture-of-experts layer); ``params`` for dense models."""
        idle = sum((op.attrs["experts"] - op.attrs["top_k"]) * op.attrs["params_per_expert"]
                   for op in self.ops if op.kind == MOE and op.attrs.get("top_k"))
        return self.params - idle

    def flops_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for op in self.ops:
            out[op.kind] = out.get(op.kind, 0) + op.flops
        return out

    def ops_by_kind(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for op in self.ops:
            out[op.kind] = out.get(op.kind, 0) + 1
        return out

    def traffic_bytes(self) -> dict[str, int]:
        """Compulsory traffic summed over ops, B: weights read, activations read+written,
        KV cache read+written."""
        return {
            "weights": sum(op.weight_bytes for op in self.ops),
            "activations": sum(op.activation_bytes_read + op.activation_bytes_written
                               for op in self.ops),
            "kv_cache": sum(op.kv_bytes_read + op.kv_bytes_written for op in self.ops),
        }

    def summary(self) -> dict[str, Any]:
        """The dict that ``dse workload --json`` prints."""
        traffic = self.traffic_bytes()
        return {
            "model": self.model,
            "phase": self.phase,
            "dtype": self.dtype,
            "batch": self.batch,
            "seq": self.seq,
            "context": self.context,
            "arch": dict(self.arch),
            "ops": len(self),
            "ops_by_kind": self.ops_by_kind(),
            "params": self.params,
            "active_params": self.active_params,
            "flops": self.flops,
            "flops_by_kind": self.flops_by_kind(),
            "bytes": {
                "weights": self.weight_footprint_bytes,
                "activations": traffic["activations"],
                "kv_cache": traffic["kv_cache"],
                "weights_read": traffic["weights"],
            },
            "unknown_ops": dict(self.unknown_targets),
            "kv_update": self.kv_update,
            "free_ops": dict(self.free_ops),
            **self._formats_summary(),
        }

    def _formats_summary(self) -> dict[str, Any]:
        """``{"formats": role -> format}`` when the workload has number formats per role
        (:mod:`workloads.formats`), else nothing."""
        from workloads.formats import workload_formats
        fm = workload_formats(self)
        return {"formats": fm.to_dict()} if fm is not None else {}


def op_signature(op: Op) -> str:
    """Ops with the same signature cost the same on any design (everything but the name)."""
    return json.dumps([op.kind, op.target, op.input_shapes, op.output_shapes, op.dtype,
                       op.flops, op.weight_bytes, op.activation_bytes_read,
                       op.activation_bytes_written, op.kv_bytes_read, op.kv_bytes_written,
                       op.attrs], sort_keys=True, default=str)
