"""What data-parallel training adds to a step beyond its compute and its collectives alone
(issue 31): the terms :mod:`simulators.training` adds for DDP and ZeRO-3 / FSDP2.

* **Compute slowed by a concurrent collective.** NCCL's kernels run on SMs and move data
  through HBM; a GEMM overlapped by an all-gather, reduce-scatter or all-reduce on another
  stream runs slower, and the collective under the GEMM too. ``compute_slowdown[kind]`` is
  the factor on compute time while a collective of ``kind`` runs, ``comm_slowdown[kind]``
  the factor on the collective while compute runs.
* **FSDP2's host work.** The ``fully_shard`` units' hooks (pre/post forward, pre/post
  backward: all-gather issue, copy-out views, reduce-scatter issue, resharding) cost host
  time per forward + backward (``fsdp_step_host_s``: the root's), per unit
  (``fsdp_unit_host_s``) and per parameter tensor (``fsdp_param_host_s``),
  ``fsdp_forward_share`` of it in the forward and the rest in the backward. A unit cannot start before the host has issued it (the host's
  own dispatch of the unit's ops is not counted: the ``kernels`` runtime has none, so the
  host chain is a lower bound).
* **Copies**, costed from first principles on the device's template (an element-wise copy
  of the bytes, read and written through HBM; nothing calibrated): FSDP2's all-gather
  copy-in (the unit's shard into the flat input, before the all-gather), copy-out (the
  gathered flat buffer into the unit's parameters, on the compute stream before the unit
  runs) and the reduce-scatter's copy-in (``chunk_cat`` of the unit's gradients, before the
  reduce-scatter). DDP's copies of the gradients into its buckets and back (PyTorch's
  ``gradient_as_bucket_view=False``) are not modelled: Megatron's contiguous buffers have
  none, and the layout does not say which framework runs it.

* **Fused attention in training** on Hopper GPUs (:func:`attention_factors`): SDPA's forward
  takes ``forward`` times the attention model's time, ``forward_dropout`` times with attention
  dropout (the capture keeps the dropout probability on the attention ops; the kernel draws
  its mask, which the model's traffic does not see); measured [M] by
  ``benchmarks/sdpa_measure.py`` on an H100, written by ``benchmarks/sdpa_fit.py`` to
  ``accelerators/calibration/train_attention_sm90.json``.

The first two are measured [M], not estimated: ``benchmarks/train_comm_measure.py`` measures
them in isolation on lent GPUs (GEMMs against concurrent collectives; Linear stacks local vs
FSDP2, host-bound), ``benchmarks/train_comm_fit.py`` turns its JSON into
``accelerators/calibration/train_overheads_<link>.json`` (per NVLink generation, as the
collectives' calibration). They apply to a data-parallel group inside one node (where they
were measured); across nodes, or with no file for a link, the terms are off (factors 1, zero
host time). They never make a step faster. Reading the file runs no code (JSON).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from accelerators.collective_calibration import shipped_json
from dse.errors import BadInput
from workloads import ir
from workloads.ir import Op

KINDS = ("all_gather", "reduce_scatter", "all_reduce")


@dataclass(frozen=True)
class Overheads:
    """The measured terms of one link standard (module docstring); the defaults are off."""
    compute_slowdown: dict[str, float] = field(default_factory=dict)
    comm_slowdown: dict[str, float] = field(default_factory=dict)
    fsdp_step_host_s: float = 0.0
    fsdp_unit_host_s: float = 0.0
    fsdp_param_host_s: float = 0.0
    fsdp_forward_share: float = 0.5
    source: str = "none"

    def compute(self, kind: str) -> float:
        return float(self.compute_slowdown.get(kind, 1.0))

    def comm(self, kind: str) -> float:
        return float(self.comm_slowdown.get(kind, 1.0))

    def unit_host_s(self, tensors: float, unit: bool = True) -> float:
        """Host seconds per step of one unit's hooks (``unit``: the unit's own cost besides
        its tensors'; a root's second block has none)."""
        return self.fsdp_unit_host_s * unit + self.fsdp_param_host_s * tensors


OFF = Overheads()


@lru_cache(maxsize=8)
def overheads_for(link: str | None) -> Overheads:
    """The shipped terms of link standard ``link`` (``nvlink4``), or :data:`OFF`."""
    if not link:
        return OFF
    name = f"train_overheads_{link}.json"
    d = shipped_json(name, "training-overhead calibration")
    return OFF if d is None else from_dict(d, name)


def overheads_in(sysm, group: list[int]) -> Overheads:
    """The terms for a data-parallel ``group`` of ``sysm``: its link's calibration when the
    group lies inside one node (where it was measured: one NVLink domain), else :data:`OFF`."""
    if sysm is None or len(group) < 2:
        return OFF
    topo = sysm.topology
    if len({topo.node_of(r) for r in group}) > 1:
        return OFF
    return overheads_for(topo.link.name)


#: GPU presets whose SDPA runs the sm90 (Hopper) kernels the attention factors were measured on.
SM90_PRESETS = ("h100", "h100-pcie", "h200")
ATTENTION_KEYS = ("forward", "backward", "forward_dropout", "backward_dropout")


@lru_cache(maxsize=4)
def _attention_file(name: str) -> dict[str, float] | None:
    d = shipped_json(name, "attention calibration")
    if d is None:
        return None
    f = d.get("factors") if isinstance(d, dict) else None
    if not isinstance(f, dict) or any(k not in ATTENTION_KEYS or not _num(v) or not 1.0 <= v <= 4.0
                                      for k, v in f.items()):
        raise BadInput(f"{name}.factors", str(f)[:60], f"an object of {ATTENTION_KEYS} to "
                       "factors in [1, 4]")
    return {k: float(v) for k, v in f.items()}


def attention_factors(design) -> dict[str, float] | None:
    """Measured factors on the fused-attention time of a training step on ``design`` (its
    forward and backward, with and without dropout: ``benchmarks/sdpa_measure.py`` against the
    attention model, written by ``benchmarks/sdpa_fit.py``), or None where none were measured
    (a GPU whose preset is not a Hopper one, or another template)."""
    if getattr(design, "name", "") != "gpu" or getattr(design, "preset", None) not in SM90_PRESETS:
        return None
    return _attention_file("train_attention_sm90.json")


def attention_factor(op: Op, factors: dict[str, float] | None) -> float:
    """The factor on ``op``'s time (1 for an op that is not fused attention)."""
    if not factors or op.kind != ir.ATTENTION:
        return 1.0
    key = "backward" if op.attrs.get("backward") else "forward"
    if op.attrs.get("dropout"):
        key += "_dropout"
    return float(factors.get(key, 1.0))


def from_dict(d: Any, name: str = "calibration") -> Overheads:
    """:class:`Overheads` from a calibration's JSON object; one line naming the bad field."""
    if not isinstance(d, dict):
        raise BadInput("calibration", name, "expected a JSON object")
    out: dict[str, Any] = {}
    for key in ("compute_slowdown", "comm_slowdown"):
        v = d.get(key, {})
        if not isinstance(v, dict) or any(
                k not in KINDS or not _num(x) or not 1.0 <= x <= 4.0 for k, x in v.items()):
            raise BadInput(f"{name}.{key}", str(v)[:60], f"an object of {KINDS} to factors "
                           "in [1, 4]")
        out[key] = {k: float(x) for k, x in v.items()}
    for key, top in (("fsdp_step_host_s", 0.1), ("fsdp_unit_host_s", 0.01),
                     ("fsdp_param_host_s", 0.01), ("fsdp_forward_share", 1.0)):
        v = d.get(key, 0.5 if key == "fsdp_forward_share" else 0.0)
        if not _num(v) or not 0.0 <= v <= top:
            raise BadInput(f"{name}.{key}", str(v)[:60],
                           f"{'a share' if top == 1.0 else 'seconds'} in [0, {top}]")
        out[key] = float(v)
    return Overheads(source=str(d.get("source", name))[:200], **out)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def copy_s(design, nbytes: float, dtype: str) -> float:
    """Time of one element-wise copy of ``nbytes`` (read and written) on ``design``."""
    if nbytes <= 0:
        return 0.0
    elem = ir.DTYPE_BYTES[dtype]
    n = max(int(nbytes // elem), 1)
    op = Op(name="copy", kind=ir.ELEMENTWISE, target="copy_", input_shapes=((n,),),
            output_shapes=((n,),), dtype=dtype, bytes_per_element=int(elem), flops=0,
            activation_bytes_read=int(n * elem), activation_bytes_written=int(n * elem),
            attrs={"elements": n})
    return design.cost(op).latency_s


def overlap_s(busy: list[tuple[float, float, str]], start: float, end: float
              ) -> dict[str, float]:
    """Seconds of ``[start, end)`` that collectives of each kind occupy (``busy``: their
    ``(start, end, kind)`` on the communication stream)."""
    out: dict[str, float] = {}
    for b0, b1, kind in busy:
        o = min(b1, end) - max(b0, start)
        if o > 0:
            out[kind] = out.get(kind, 0.0) + o
    return out


def slowed(compute_s: float, overlaps: dict[str, float], terms: Overheads) -> float:
    """``compute_s`` stretched by the collectives overlapping it: each second of overlap
    with a collective of kind ``k`` costs ``compute_slowdown[k] - 1`` more (the overlap
    counted at most up to the compute time)."""
    left, extra = compute_s, 0.0
    for kind, o in sorted(overlaps.items()):
        o = min(o, left)
        extra += (terms.compute(kind) - 1.0) * o
        left -= o
    return compute_s + extra
