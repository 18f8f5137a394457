"""Metrics a study can optimise or constrain, objectives and constraints, and how the metrics of
several workloads combine into the study's totals.

Totals of a multi-task study (each workload ``i`` with weight ``w_i``, runs per multi-task
step): ``latency_s = sum w_i L_i``; ``energy_j = sum w_i E_i``; ``area_mm2``, ``cost_usd`` and
``tdp_w`` are the design's (counted once); ``avg_power_w = energy_j / latency_s``; ``edp = energy_j * latency_s``;
``throughput`` is the workload's own (tokens/s or samples/s) with one workload and multi-task
steps per second, ``1 / latency_s``, with several; ``quality`` is the weight-averaged quality;
``params`` and ``flops`` are summed (flops weighted). Each workload's own metrics are also
available as ``LABEL.metric`` (e.g. ``resnet18.latency_s``).

A study of one workload takes that workload's ``avg_power_w``, ``edp`` and ``throughput`` as
they are. A serving study (``serving:``, one served model) also has :data:`SERVING_METRICS`;
there ``latency_s`` is a request's mean end-to-end latency, ``energy_j`` the energy per output
token, ``avg_power_w`` the mean power over the run (energy over the span, idle included:
``ServingResult.avg_power_w``), ``edp`` the energy per output token times the mean
end-to-end latency (``ServingResult.edp``) and ``throughput`` output tokens/s.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from dse.errors import BadInput

#: metric -> (usual direction, unit). The first eight come from the simulator's Result.
METRICS: dict[str, tuple[str, str]] = {
    "latency_s": ("minimize", "s"),
    "energy_j": ("minimize", "J"),
    "area_mm2": ("minimize", "mm²"),
    "avg_power_w": ("minimize", "W"),
    "edp": ("minimize", "J s"),
    "throughput": ("maximize", "items/s"),
    "cost_usd": ("minimize", "US$ per chip"),
    "tdp_w": ("minimize", "W"),
    "quality": ("maximize", "relative to the zoo's reference architecture"),
    "params": ("minimize", "parameters"),
    "flops": ("minimize", "FLOP"),
}
#: Metrics of the design itself, the same for every workload it runs.
DESIGN_METRICS = ("area_mm2", "cost_usd", "tdp_w")
#: Metrics of one workload (``LABEL.metric``).
WORKLOAD_METRICS = ("latency_s", "energy_j", "avg_power_w", "edp", "throughput", "quality",
                    "params", "flops")
#: Metrics of a study on a system (``system:``): time in collectives (s), devices.
SYSTEM_METRICS = {"communication_s": ("minimize", "s"), "devices": ("minimize", "devices")}
#: Metrics of a serving study (``serving:``, :meth:`simulators.serving.ServingResult.metrics`):
#: latency percentiles (s), throughput (output tokens/s), goodput (requests/s meeting the
#: SLOs), cost (US$ per million output tokens), energy per output token (J), counts.
SERVING_METRICS = {
    "ttft_p99_s": ("minimize", "s"), "tpot_p99_s": ("minimize", "s"),
    "e2e_p99_s": ("minimize", "s"), "ttft_p50_s": ("minimize", "s"),
    "tpot_p50_s": ("minimize", "s"), "throughput_tok_s": ("maximize", "tokens/s"),
    "goodput_req_s": ("maximize", "requests/s"),
    "cost_per_mtok_usd": ("minimize", "US$ per million tokens"),
    "energy_per_token_j": ("minimize", "J"), "preemptions": ("minimize", "preemptions"),
    "rejected": ("minimize", "requests")}
#: Metrics of a disaggregated study (``disaggregated:``,
#: :meth:`simulators.disaggregated.DisaggregatedResult.metrics`) beside the serving ones: SLO
#: attainment (share of requests within both SLOs), goodput per device (requests/s), devices
#: in both pools, p99 KV transfer time (s).
DISAGGREGATED_METRICS = {
    "slo_attainment": ("maximize", "share of requests"),
    "goodput_per_device_req_s": ("maximize", "requests/s per device"),
    "devices": ("minimize", "devices"), "kv_transfer_p99_s": ("minimize", "s")}
#: Metrics of a fleet study (``fleet:``, :meth:`simulators.fleet.FleetResult.metrics`): the
#: fleet's price (US$/h), instances, the saving against the menu without the design and
#: against the best single type, the share of requests the design serves.
FLEET_METRICS = {
    "fleet_cost_usd_per_h": ("minimize", "US$/h"), "fleet_devices": ("minimize", "instances"),
    "saving_vs_menu": ("maximize", "share of the menu-only fleet's cost"),
    "saving_vs_best_single": ("maximize", "share"),
    "design_share": ("maximize", "share of requests"),
    "slo_attainment": ("maximize", "share of requests (with confirm)")}
#: Metrics of a training study (``training:``, :meth:`simulators.training.TrainResult.metrics`):
#: one step's time (s), tokens/s, MFU and HFU (0-1), the busiest device's memory (B), energy
#: per step (J) and the time (s, days), cost (US$) and energy (J) to train the study's tokens.
TRAINING_METRICS = {
    "step_time_s": ("minimize", "s"), "tokens_per_s": ("maximize", "tokens/s"),
    "mfu": ("maximize", "fraction"), "hfu": ("maximize", "fraction"),
    "peak_memory_bytes": ("minimize", "B"), "energy_per_step_j": ("minimize", "J"),
    "train_time_s": ("minimize", "s"), "train_time_days": ("minimize", "days"),
    "train_cost_usd": ("minimize", "US$"), "train_energy_j": ("minimize", "J")}
#: Metrics of a heterogeneous design's shared budgets.
BUDGET_METRICS = {"total_pes": ("minimize", "PEs"),
                  "total_bandwidth_Bps": ("minimize", "B/s")}

_DIRECTIONS = {"minimize": "minimize", "min": "minimize", "maximize": "maximize",
               "max": "maximize"}
_CONSTRAINT_RE = re.compile(r"^\s*([A-Za-z][\w\-]*(?:\.[A-Za-z_]\w*)?)\s*(<=|>=|<|>)\s*(\S+)\s*$")


def allowed_metrics(workload_labels: Sequence[str], heterogeneous: bool,
                    system: bool = False, serving: bool = False, form: str = "",
                    training: bool = False) -> list[str]:
    """Every metric name a study with these workloads may use (``form``: ``disaggregated`` or
    ``fleet`` for those studies)."""
    extra = {"disaggregated": list(SERVING_METRICS) + [
        m for m in DISAGGREGATED_METRICS if m not in SERVING_METRICS],
        "fleet": list(FLEET_METRICS)}.get(form, [])
    names = (list(SERVING_METRICS) if serving else []) + extra + (
        list(TRAINING_METRICS) if training else []) + list(METRICS) + (
        list(SYSTEM_METRICS) if system else [])
    if len(workload_labels) > 1:
        names += [f"{w}.{m}" for w in workload_labels for m in WORKLOAD_METRICS]
    if heterogeneous:
        names += list(BUDGET_METRICS)
    return names


def _check_metric(field: str, name: Any, allowed: Sequence[str]) -> str:
    if not isinstance(name, str) or name not in allowed:
        shown = ", ".join(allowed if len(allowed) <= 14 else list(allowed[:14]) + ["..."])
        raise BadInput(field, name, f"expected a metric: {shown}")
    return name


def base_metric(name: str) -> str:
    """``resnet18.latency_s`` -> ``latency_s``."""
    return name.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class Objective:
    """One objective: a metric and whether the search minimises or maximises it."""

    metric: str
    direction: str

    @property
    def sign(self) -> float:
        """+1 when smaller is better, -1 when larger is better."""
        return 1.0 if self.direction == "minimize" else -1.0


#: Violation reported for a value exactly on a strict (``<``, ``>``) threshold: positive, so
#: Optuna counts it infeasible, and too small to weigh against real violations.
STRICT_MARGIN = 1e-12


@dataclass(frozen=True)
class Constraint:
    """``metric op threshold`` with op ``<=``, ``<``, ``>=`` or ``>`` (a strict op refuses
    the threshold itself)."""

    metric: str
    op: str
    threshold: float

    @property
    def label(self) -> str:
        return f"{self.metric}{self.op}{self.threshold:g}"

    def violation(self, value: float) -> float:
        """How far ``value`` is outside the threshold, relative to it (<= 0: satisfied).

        Relative, so violations of metrics in different units can be summed by the samplers.
        """
        if not math.isfinite(value):
            return 1e9
        excess = value - self.threshold if self.op in ("<=", "<") else self.threshold - value
        scale = abs(self.threshold) if self.threshold != 0 else 1.0
        if self.op in ("<", ">") and excess >= 0:    # on the threshold: outside a strict bound
            return max(excess / scale, STRICT_MARGIN)
        return excess / scale


def parse_objective(raw: Any, field: str, allowed: Sequence[str]) -> Objective:
    """``"latency_s"`` (its usual direction) or ``{"quality": "maximize"}``."""
    if isinstance(raw, str):
        metric = _check_metric(field, raw.strip(), allowed)
        return Objective(metric, _usual_direction(metric))
    if isinstance(raw, dict) and len(raw) == 1:
        (metric, direction), = raw.items()
        metric = _check_metric(field, metric, allowed)
        if not isinstance(direction, str) or direction.strip().lower() not in _DIRECTIONS:
            raise BadInput(f"{field}.{metric}", direction, "expected minimize or maximize")
        return Objective(metric, _DIRECTIONS[direction.strip().lower()])
    raise BadInput(field, raw, "expected a metric name or {metric: minimize | maximize}")


def _usual_direction(metric: str) -> str:
    base = base_metric(metric)
    return (METRICS.get(base) or BUDGET_METRICS.get(base) or SYSTEM_METRICS.get(base)
            or SERVING_METRICS.get(base) or DISAGGREGATED_METRICS.get(base)
            or FLEET_METRICS.get(base) or TRAINING_METRICS.get(base) or ("minimize",))[0]


def parse_constraint(raw: Any, field: str, allowed: Sequence[str]) -> Constraint:
    """``"latency_s <= 0.02"`` or ``{metric: latency_s, op: "<=", value: 0.02}``."""
    if isinstance(raw, str):
        m = _CONSTRAINT_RE.match(raw)
        if not m:
            raise BadInput(field, raw, "expected 'metric <= value' or 'metric >= value'")
        metric, op, value = m.groups()
    elif isinstance(raw, dict) and set(raw) == {"metric", "op", "value"}:
        metric, op, value = raw["metric"], raw["op"], raw["value"]
        if op not in ("<=", ">=", "<", ">"):
            raise BadInput(f"{field}.op", op, "expected <=, <, >= or >")
    else:
        raise BadInput(field, raw, "expected 'metric <= value' or {metric, op, value}")
    metric = _check_metric(field, metric, allowed)
    try:
        if isinstance(value, bool):
            raise ValueError
        threshold = float(value)
        if not math.isfinite(threshold):
            raise ValueError
    except (TypeError, ValueError):
        raise BadInput(field, raw, "expected a finite number after the operator") from None
    return Constraint(metric, op, threshold)


# ------------------------------------------------------------------------------ aggregation
def workload_metrics(result_metrics: Mapping[str, float], params: int, flops: int,
                     quality: float | None) -> dict[str, float]:
    """One workload's metrics: the simulator's plus parameters, FLOPs and quality."""
    out = {k: float(v) for k, v in result_metrics.items() if k not in DESIGN_METRICS}
    out["params"] = float(params)
    out["flops"] = float(flops)
    if quality is not None:
        out["quality"] = float(quality)
    return out


#: Metrics :func:`totals` sums over the workloads where every workload has them.
_SUMMED = tuple({**SERVING_METRICS, **DISAGGREGATED_METRICS, **FLEET_METRICS,
                 **TRAINING_METRICS})
_SUMMED_SET = frozenset(_SUMMED)


def _one_workload(own: Mapping[str, float], weight: float, design: Mapping[str, float],
                  extra: Mapping[str, float] | None) -> dict[str, float]:
    """:func:`totals` of one workload without serving, training, communication or quality
    metrics (a population's usual case): the same operations on the one workload."""
    latency = 0 + weight * own["latency_s"]   # as sum() over one label: from int 0
    energy = 0 + weight * own["energy_j"]
    out: dict[str, float] = {
        "latency_s": latency,
        "energy_j": energy,
        **{k: float(design[k]) for k in DESIGN_METRICS},
        "avg_power_w": own.get("avg_power_w", energy / latency if latency > 0 else 0.0),
        "edp": own.get("edp", energy * latency),
        "params": 0 + own["params"],
        "flops": 0 + weight * own["flops"],
        "throughput": own["throughput"],
    }
    out.update(extra or {})
    return out


def totals(per_workload: Mapping[str, Mapping[str, float]], weights: Mapping[str, float],
           design: Mapping[str, float], extra: Mapping[str, float] | None = None
           ) -> dict[str, float]:
    """The study's metrics from each workload's (see the module docstring) and the design's
    own (``DESIGN_METRICS``), plus ``LABEL.metric`` entries when there are several workloads."""
    if len(per_workload) == 1:
        (label, own), = per_workload.items()
        if not _SUMMED_SET.intersection(own) and "communication_s" not in own and \
                "quality" not in own:
            return _one_workload(own, weights[label], design, extra)
    return _totals(per_workload, weights, design, extra)


def _totals(per_workload: Mapping[str, Mapping[str, float]], weights: Mapping[str, float],
            design: Mapping[str, float], extra: Mapping[str, float] | None) -> dict[str, float]:
    """:func:`totals` over any workloads."""
    labels = list(per_workload)
    latency = sum(weights[w] * per_workload[w]["latency_s"] for w in labels)
    energy = sum(weights[w] * per_workload[w]["energy_j"] for w in labels)
    out: dict[str, float] = {
        "latency_s": latency,
        "energy_j": energy,
        **{k: float(design[k]) for k in DESIGN_METRICS},
        "avg_power_w": energy / latency if latency > 0 else 0.0,
        "edp": energy * latency,
        "params": sum(per_workload[w]["params"] for w in labels),
        "flops": sum(weights[w] * per_workload[w]["flops"] for w in labels),
    }
    if len(labels) == 1:   # one workload: its own power, EDP and throughput (a serving
        own = per_workload[labels[0]]   # run's power is over its span, not energy / latency)
        out["throughput"] = own["throughput"]
        out["avg_power_w"] = own.get("avg_power_w", out["avg_power_w"])
        out["edp"] = own.get("edp", out["edp"])
    else:
        out["throughput"] = 1.0 / latency if latency > 0 else 0.0
    common = _SUMMED_SET.intersection(*(per_workload[w] for w in labels))
    for key in (k for k in _SUMMED if k in common) if common else ():
        out[key] = sum(per_workload[w][key] for w in labels)
    if all("communication_s" in per_workload[w] for w in labels):
        out["communication_s"] = sum(weights[w] * per_workload[w]["communication_s"]
                                     for w in labels)
    if all("quality" in per_workload[w] for w in labels):
        total_w = sum(weights[w] for w in labels)
        out["quality"] = sum(weights[w] * per_workload[w]["quality"] for w in labels) / total_w
    if len(labels) > 1:
        for w in labels:
            for k, v in per_workload[w].items():
                out[f"{w}.{k}"] = v
    out.update(extra or {})
    return out
