"""The result of simulating one workload on one design."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

#: Version of the simulator's cost semantics; stored with every search trial.
#: 0.2.0 (issue 27): the fast path never below its units' busy time and channels' bytes; serving
#: iterations route MoE tokens; cost per token from simulators.economics.
SIMULATOR_VERSION = "0.2.0"


@dataclass(frozen=True, slots=True)
class OpRecord:
    """One op as simulated: when it ran (s), where, and what it cost; ``details``: the
    template's op-specific figures (tiles of a sparse attention op), empty for most ops."""

    name: str
    kind: str
    unit: str
    start_s: float
    end_s: float
    cycles: float
    compute_cycles: float
    flops: int
    bytes: int
    energy_j: float
    bound: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class Result:
    """Latency (s), energy (J) by component, area (mm^2) and its breakdown, cost per chip (US$)
    and its breakdown,
    TDP (W), off-chip memory (standard, devices, capacity B, bandwidth B/s), average power (W),
    ``busy_fraction`` per unit (0-1: the share of the latency the unit holds an op, memory
    stalls included), ``compute_utilisation`` (0-1: the FLOPs done per second over the
    design's peak FLOP/s for the workload's dtype, :meth:`Template.peaks`; NaN where the
    template declares none), and per-op records. ``throughput`` is items/s where the item is
    a token for LLM phases and a sample otherwise (``throughput_unit`` says which)."""

    model: str
    phase: str
    accelerator: dict[str, Any]
    latency_s: float
    energy_j: float
    energy_breakdown_j: dict[str, float]
    area_mm2: float
    avg_power_w: float
    busy_fraction: dict[str, float]
    throughput: float
    throughput_unit: str
    ops: list[OpRecord] = field(default_factory=list)
    events: int = 0
    area_breakdown_mm2: dict[str, float] = field(default_factory=dict)
    cost_usd: float = float("nan")
    cost_breakdown_usd: dict[str, float] = field(default_factory=dict)
    tdp_w: float = float("nan")
    memory: dict[str, Any] | None = None
    fidelity: str = "event"
    simulator_version: str = SIMULATOR_VERSION
    compute_utilisation: float = float("nan")

    @property
    def utilisation(self) -> dict[str, float]:
        """Deprecated name of :attr:`busy_fraction` (busy time, not FLOP/s over peak: that is
        :attr:`compute_utilisation`)."""
        return self.busy_fraction

    @property
    def edp(self) -> float:
        """Energy-delay product, J s."""
        return self.energy_j * self.latency_s

    def metrics(self) -> dict[str, float]:
        """The scalar metrics a search can optimise or constrain."""
        return {"latency_s": self.latency_s, "energy_j": self.energy_j,
                "area_mm2": self.area_mm2, "avg_power_w": self.avg_power_w,
                "edp": self.edp, "throughput": self.throughput, "cost_usd": self.cost_usd,
                "tdp_w": self.tdp_w}

    def breakdown_by_kind(self) -> dict[str, dict[str, float]]:
        """Busy time (s) and energy (J) summed per op kind."""
        out: dict[str, dict[str, float]] = {}
        for r in self.ops:
            d = out.setdefault(r.kind, {"time_s": 0.0, "energy_j": 0.0, "ops": 0})
            d["time_s"] += r.duration_s
            d["energy_j"] += r.energy_j
            d["ops"] += 1
        return out

    def to_dict(self, ops: bool = True) -> dict[str, Any]:
        d = {"model": self.model, "phase": self.phase, "accelerator": self.accelerator,
             "latency_s": self.latency_s, "energy_j": self.energy_j,
             "energy_breakdown_j": self.energy_breakdown_j, "area_mm2": self.area_mm2,
             "area_breakdown_mm2": self.area_breakdown_mm2, "cost_usd": self.cost_usd,
             "cost_breakdown_usd": self.cost_breakdown_usd,
             "tdp_w": self.tdp_w, "memory": self.memory,
             "avg_power_w": self.avg_power_w, "edp": self.edp,
             "throughput": self.throughput, "throughput_unit": self.throughput_unit,
             "busy_fraction": self.busy_fraction,
             "compute_utilisation": (self.compute_utilisation
                                     if self.compute_utilisation == self.compute_utilisation
                                     else None), "events": self.events, "fidelity": self.fidelity,
             "simulator_version": self.simulator_version}
        if ops:
            d["ops"] = [{k: v for k, v in asdict(r).items() if k != "details" or v}
                        for r in self.ops]
        return d

    def to_chrome_trace(self) -> dict[str, Any]:
        """Chrome trace-event JSON (opens in Perfetto / chrome://tracing); times in us."""
        units = sorted({r.unit for r in self.ops})
        tid = {u: i for i, u in enumerate(units)}
        events: list[dict[str, Any]] = [
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": tid[u], "args": {"name": u}}
            for u in units]
        for r in self.ops:
            events.append({"name": r.name, "cat": r.kind, "ph": "X", "pid": 0, "tid": tid[r.unit],
                           "ts": r.start_s * 1e6, "dur": max(r.duration_s, 0.0) * 1e6,
                           "args": {"flops": r.flops, "bytes": r.bytes, "energy_j": r.energy_j,
                                    "bound": r.bound, "cycles": r.cycles}})
        return {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"model": self.model, "accelerator": json.dumps(self.accelerator)}}
