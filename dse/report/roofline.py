"""Roofline data of one simulated design: each op's arithmetic intensity (FLOP/B) and achieved
rate (FLOP/s), and the design's roofs.

Roofs, best source first:

* peak compute, FLOP/s: the template's ``peak_flops_per_s()`` when it defines one, else the
  sum of its units' peaks (``Template.peaks``, the design's datapath; bf16 on a GPU); otherwise
  the highest rate any op reached while its unit computed without a memory stall
  (``flops / compute_s``, with ``compute_s = compute_cycles / clock`` and the clock recovered
  from ``cycles / duration``), labelled "best observed" — a lower bound on the peak.
* bandwidth, B/s: each shared channel of the template's ``resources()`` (one roof per channel);
  otherwise the highest ``bytes / duration`` of any op, labelled "best observed".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from simulators.result import OpRecord, Result


@dataclass(frozen=True)
class Roofs:
    """Peak compute (FLOP/s) and per-channel bandwidth (B/s), each with where it came from."""

    peak_flops_per_s: float | None
    peak_source: str
    bandwidths_Bps: dict[str, float] = field(default_factory=dict)
    bandwidth_source: str = ""


def op_point(r: OpRecord) -> tuple[float, float] | None:
    """(intensity FLOP/B, achieved FLOP/s) of one op, or None when it cannot sit on log axes
    (no FLOPs, no bytes, or no duration)."""
    d = r.duration_s
    if r.flops <= 0 or r.bytes <= 0 or d <= 0:
        return None
    return r.flops / r.bytes, r.flops / d


def rebuild_template(accelerator: dict[str, Any]):
    """The design a :class:`Result` describes (``result.accelerator``), or None when its
    template is not registered (e.g. a test template)."""
    from accelerators.registry import make_accelerator
    from dse.errors import DSEError
    name = accelerator.get("template")
    if not name:
        return None
    spec = name + (f":{accelerator['preset']}" if accelerator.get("preset") else "")
    try:
        return make_accelerator(spec, dict(accelerator.get("hw") or {}))
    except (DSEError, ImportError):
        return None


def roofs_for(result: Result, template: Any = None) -> Roofs:
    """The roofs of the design that produced ``result`` (``template``: that design, if known;
    otherwise it is rebuilt from ``result.accelerator``)."""
    template = template if template is not None else rebuild_template(result.accelerator)
    peak, peak_src = None, ""
    hook = getattr(template, "peak_flops_per_s", None)
    if callable(hook):
        try:
            peak = float(hook())
            peak_src = "template peak"
        except Exception:  # a template hook that cannot answer for this design
            peak = None
    if not peak and template is not None and callable(getattr(template, "peaks", None)):
        try:   # Template.peaks: every unit's peak for the design's datapath (bf16 on a GPU)
            p = template.peaks(template.hw.get("dtype") or "bf16")
            peak = sum(p.flops_per_s.values()) if p is not None else None
            peak_src = "template peak"
        except Exception:  # a template that cannot answer for this design
            peak = None
    if not peak:
        rates = []
        for r in result.ops:
            if r.flops > 0 and r.compute_cycles > 0 and r.cycles > 0 and r.duration_s > 0:
                compute_s = r.compute_cycles * r.duration_s / r.cycles
                rates.append(r.flops / compute_s)
        peak = max(rates) if rates else None
        peak_src = "best observed compute rate"
    bws: dict[str, float] = {}
    bw_src = ""
    if template is not None:
        try:
            bws = {k: float(v) for k, v in template.resources().channels.items() if v and v > 0}
            bw_src = "template channels"
        except Exception:  # resources() of a partly built design
            bws = {}
    if not bws:
        observed = [r.bytes / r.duration_s for r in result.ops if r.bytes > 0 and r.duration_s > 0]
        if observed:
            bws = {"best observed": max(observed)}
            bw_src = "best observed bandwidth"
    return Roofs(peak, peak_src, bws, bw_src)
