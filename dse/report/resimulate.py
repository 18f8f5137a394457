"""Re-simulate a stored design to get its per-op records (breakdowns, timeline, roofline), or
for a serving study its serving run (per-request latencies, KV cache over time).

A trial stores only scalar metrics; the detail view needs every op, so the report simulates the
Pareto designs again from the trial's ``design`` user attr (see :mod:`dse.report.study_data`).
The simulator is deterministic, so this reproduces the trial's numbers when the simulator
version matches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from dse.errors import BadInput, DSEError

#: Keys of a workload spec passed on to ``api.workload`` [R dse/api.py].
WORKLOAD_KEYS = ("model", "phase", "batch", "seq", "context", "dtype", "arch", "hf_config")


@dataclass
class Resimulated:
    """The design (a Template, or None if it could not be built) and one entry per workload:
    (label, Result or None, error text or None)."""

    template: Any
    runs: list[tuple[str, Any, str | None]] = field(default_factory=list)
    error: str | None = None


def workload_label(spec: dict[str, Any]) -> str:
    """``"gpt2 decode · batch 8 · context 1024 · bf16"`` from a workload spec."""
    parts = [str(spec.get("model", "?")) + (f" {spec['phase']}" if spec.get("phase") else "")]
    for key in ("batch", "seq", "context"):
        if spec.get(key) is not None:
            parts.append(f"{key} {spec[key]}")
    if spec.get("dtype"):
        parts.append(str(spec["dtype"]))
    if spec.get("arch"):
        parts.append(" ".join(f"{k}={v}" for k, v in sorted(spec["arch"].items())))
    return " · ".join(parts)


def resimulate_trial(row: Any, spec: dict[str, Any] | None = None) -> Resimulated:
    """Re-simulate a study trial (a :class:`~dse.report.study_data.TrialRow`) from its
    ``design`` user attr: in ``dse.study``'s form (with ``spec``, the study user attr
    ``dse_spec``, for the workloads) or the self-contained form."""
    d = row.design
    if d is None:
        return Resimulated(None, error="the trial stores no design (user attr 'design') to re-simulate")
    if "designs" in d:
        if not isinstance(spec, dict) or not spec.get("workloads"):
            return Resimulated(None, error="the study stores no spec (user attr 'dse_spec') "
                                           "naming its workloads")
        if isinstance(spec.get("serving"), dict):
            return resimulate_serving(d, spec, row.fidelity)
        for form, command in (("disaggregated", "disaggregate"), ("fleet", "fleet")):
            if isinstance(spec.get(form), dict):
                return Resimulated(None, error=f"a {form} study's design is scored as a "
                                   f"whole (its metrics above); `dse {command}` runs one")
        return resimulate_study_design(d, spec)
    return resimulate(d)


def resimulate_study_design(design: dict[str, Any], spec: dict[str, Any]) -> Resimulated:
    """A design as ``dse.study`` stores it (``designs``, ``arch``, ``assign``, ``design``) on
    the workloads of its study spec; heterogeneous designs rebuilt with their op assignment."""
    from dse import api
    from simulators.engine import simulate
    built = _rebuild(design)
    if isinstance(built, Resimulated):
        return built
    hetero = spec.get("sub_accelerators") is not None
    if hetero:
        from accelerators.heterogeneous import Heterogeneous, segment_ops
        combined = Heterogeneous(built)
    else:
        combined = built.get(design.get("design")) or next(iter(built.values()))
    out = Resimulated(combined)
    for w in spec["workloads"]:
        label = w.get("name") or w.get("model")
        text = f"{label}: {workload_label(w)}" + (f" · ×{w['weight']:g} per step"
                                                  if w.get("weight", 1) != 1 else "")
        try:
            wl = api.workload(w["model"], phase=w.get("phase"), batch=w.get("batch"),
                              seq=w.get("seq"), context=w.get("context"),
                              dtype=w.get("dtype", "bf16"),
                              arch=(design.get("arch") or {}).get(label) or None)
            target = combined
            if hetero:
                segs = (design.get("assign") or {}).get(label) or []
                groups = segment_ops(wl, len(segs))
                target = combined.with_assignment(
                    {op: sub for names, sub in zip(groups, segs) for op in names})
            out.runs.append((text, simulate(wl, target), None))
        except DSEError as exc:
            out.runs.append((text, None, str(exc)))
    return out


def _rebuild(design: dict[str, Any]) -> dict[str, Any] | Resimulated:
    """The accelerators of a design as ``dse.study`` stores it, by name, or a
    :class:`Resimulated` saying why they cannot be built. The stored ``hw`` holds every
    parameter; only those that differ from the preset are passed, as the study passed them:
    a template may treat a value set by hand differently from its preset's (the gpu keeps a
    calibration file's fitted efficiencies unless they are given)."""
    from accelerators.registry import get_template
    built = {}
    try:
        for name, info in (design.get("designs") or {}).items():
            cls = get_template(info["template"])
            preset = dict(cls(info.get("preset")).hw)
            hw = {k: v for k, v in (info.get("hw") or {}).items() if preset.get(k, v) != v
                  or k not in preset}
            built[name] = cls(info.get("preset"), **hw)
    except (DSEError, KeyError, TypeError) as exc:
        return Resimulated(None, error=f"cannot rebuild the design: {exc}")
    if not built:
        return Resimulated(None, error="the trial's design lists no accelerator")
    return built


def serving_label(sv: dict[str, Any]) -> str:
    """``"serving sharegpt at 20 requests/s · 1,000 requests · continuous batching"``."""
    rate = sv.get("rate")
    return (f"serving {sv.get('trace')}" + (f" at {rate:g} requests/s" if rate else "")
            + f" · {sv.get('requests', 0):,} requests · {sv.get('scheduler')} batching")


def resimulate_serving(design: dict[str, Any], spec: dict[str, Any],
                       fidelity: str = "event") -> Resimulated:
    """A serving study's design (``spec["serving"]``, :mod:`dse.study.evaluate`): its serving
    run of the study's trace, scheduler and SLOs, with the trial's model architecture, on the
    design or the trial's system, at the trial's ``fidelity`` (so the trial's numbers come
    back); one run, a :class:`simulators.serving.ServingResult`."""
    from dse import api
    built = _rebuild(design)
    if isinstance(built, Resimulated):
        return built
    device = built.get(design.get("design")) or next(iter(built.values()))
    sv = spec["serving"]
    label = spec["workloads"][0].get("name") or sv.get("model")
    text = f"{label}: {serving_label(sv)}"
    out = Resimulated(device)
    try:
        where: dict[str, Any] = {"accelerator": device}
        if design.get("system"):
            from accelerators.system import System
            from workloads.parallel import layout_from
            stored = design["system"]
            system = System(device, stored.get("preset"), **dict(stored.get("sys") or {}))
            where = {"system": system, "parallel": layout_from(design.get("parallel"))}
        r = api.serve(sv["model"], trace=sv.get("trace", "sharegpt"), rate=sv.get("rate"),
                      requests=sv.get("requests"), arrival=sv.get("arrival", "poisson"),
                      burstiness=sv.get("burstiness", 1.0), seed=sv.get("seed", 0),
                      scheduler=sv.get("scheduler", "continuous"),
                      max_batch=sv.get("max_batch", 256), token_budget=sv.get("token_budget"),
                      slo_ttft_s=sv.get("slo_ttft_s"), slo_tpot_s=sv.get("slo_tpot_s"),
                      dtype=sv.get("dtype", "bf16"),
                      arch=(design.get("arch") or {}).get(label) or None,
                      fidelity="event" if fidelity == "event" else "fast", **where)
        out.runs.append((text, r, None))
    except (DSEError, KeyError, TypeError) as exc:
        out.runs.append((text, None, str(exc)))
    return out


def resimulate(design: dict[str, Any],
               workload_fn: Callable[..., Any] | None = None) -> Resimulated:
    """Build the design and simulate each of its workloads; errors are kept, never raised."""
    from dse import api
    from simulators.engine import simulate
    workload_fn = workload_fn or api.workload
    spec = design.get("accelerator")
    if not isinstance(spec, str):
        return Resimulated(None, error="the trial's design names no accelerator")
    try:
        template = api.accelerator(spec, dict(design.get("hw") or {}))
    except DSEError as exc:
        return Resimulated(None, error=str(exc))
    out = Resimulated(template)
    workloads = design.get("workloads") or []
    if not workloads:
        out.error = "the trial's design lists no workloads"
    for w in workloads:
        if not isinstance(w, dict):
            out.runs.append((str(w), None, "a workload spec must be a mapping"))
            continue
        label = workload_label(w)
        kwargs = {k: w[k] for k in WORKLOAD_KEYS if k in w and w[k] is not None}
        try:
            if "model" not in kwargs:
                raise BadInput("design.workloads.model", None, "expected a zoo model name")
            model = kwargs.pop("model")
            result = simulate(workload_fn(model, **kwargs), template)
            out.runs.append((label, result, None))
        except DSEError as exc:
            out.runs.append((label, None, str(exc)))
    return out
