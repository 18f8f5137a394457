"""A heterogeneous design: several sub-accelerators (each its own template, dataflow and size)
as one :class:`Template`, with each op of a workload assigned to one of them.

The combined design's units and channels are the sub-accelerators' own, prefixed by their name
(``a/array``, ``b/dram``): sub-accelerators run concurrently, each with its own off-chip
bandwidth, as in NASAIC's heterogeneous ASIC (Yang et al., DAC 2020). An op costs what its
sub-accelerator says; a tensor passed between ops on different sub-accelerators goes through
off-chip memory, which the templates already count (their costs read inputs and write outputs at
the op boundary). The sub-accelerators share one chip: its silicon, memory devices, package,
cost and power are their floorplans combined (:func:`accelerators.physical.combine`).

Each workload is cut into ``segments`` contiguous pieces of (nearly) equal FLOPs in topological
order, and the search assigns each piece to a sub-accelerator; one segment per workload assigns
whole workloads (NASAIC's network-to-sub-accelerator mapping).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping, Sequence

from accelerators.base import HardwareConfig, OpCost, Resources, Template
from accelerators.physical import Floorplan, combine
from dse.errors import InfeasibleDesign
from workloads.ir import Op, Workload

SEPARATOR = "/"


def segment_ops(workload: Workload, segments: int) -> list[list[str]]:
    """Op names of ``workload`` cut into ``segments`` contiguous groups of about equal FLOPs
    (ops without FLOPs go with their neighbours); trailing groups may be empty when the
    workload has fewer ops than segments."""
    ops = workload.ops
    total = sum(op.flops for op in ops)
    groups: list[list[str]] = [[] for _ in range(segments)]
    done = 0
    for i, op in enumerate(ops):
        if total > 0:
            g = min(int(segments * done / total), segments - 1)
        else:
            g = min(i * segments // max(len(ops), 1), segments - 1)
        groups[g].append(op.name)
        done += op.flops
    return groups


def sub_workload(workload: Workload, names: Sequence[str]) -> Workload:
    """The part of ``workload`` made of ops ``names`` (edges among them kept). Its ``params``
    counts the weights those ops read."""
    graph = workload.graph.subgraph(names).copy()
    part = Workload(graph=graph, model=workload.model, phase=workload.phase,
                    dtype=workload.dtype, batch=workload.batch, seq=workload.seq,
                    context=workload.context, arch=dict(workload.arch))
    bpe = max(workload.bytes_per_element, 1)
    part.params = sum(op.weight_bytes for op in part.ops) // bpe
    return part


def pe_count(design: Template) -> int | None:
    """Processing elements of a design: ``rows x cols x arrays`` when it has those parameters
    (systolic templates), else ``None``."""
    hw = design.hw
    if "rows" in hw and "cols" in hw:
        return int(hw["rows"]) * int(hw["cols"]) * int(hw.get("arrays", 1) or 1)
    return None


def offchip_bandwidth_Bps(design: Template) -> float:
    """Off-chip bandwidth a design provisions, B/s: its memory interface's (what a budget
    limits; transfers sustain the standard's share of it), else the bandwidth of all shared
    channels it offers the simulator."""
    phys = design.physical()
    if phys is not None and phys.memory is not None:
        return float(phys.memory.bandwidth_Bps)
    return float(sum(design.resources().channels.values()))


class Heterogeneous(Template):
    """Sub-accelerators side by side; ``assignment`` maps op name -> sub-accelerator name."""

    name = "heterogeneous"
    description = "named sub-accelerators side by side, each op assigned to one of them"
    PARAMS = ()

    def __init__(self, subs: Mapping[str, Template], assignment: Mapping[str, str] | None = None):
        # Not Template.__init__: the parameters are the sub-accelerators', already validated.
        self.subs = dict(subs)
        for sub in self.subs.values():
            sub.embedded = True
        self.assignment = dict(assignment or {})
        self.preset = None
        self.hw = HardwareConfig({f"{n}.{k}": v for n, s in self.subs.items()
                                  for k, v in s.hw.items()})

    def with_assignment(self, assignment: Mapping[str, str]) -> "Heterogeneous":
        return Heterogeneous(self.subs, assignment)

    def _sub_of(self, op: Op) -> str:
        try:
            return self.assignment[op.name]
        except KeyError:
            raise InfeasibleDesign(f"op {op.name} is assigned to no sub-accelerator") from None

    def _parts(self, workload: Workload) -> dict[str, list[str]]:
        parts: dict[str, list[str]] = {}
        for op in workload.ops:
            parts.setdefault(self._sub_of(op), []).append(op.name)
        return parts

    @staticmethod
    def _prefixed(sub: str, cost: OpCost) -> OpCost:
        p = f"{sub}{SEPARATOR}"
        return replace(cost, unit=p + cost.unit,
                       also_holds=tuple(p + u for u in cost.also_holds),
                       traffic={p + c: b for c, b in cost.traffic.items()})

    def cost(self, op: Op) -> OpCost:
        sub = self._sub_of(op)
        return self._prefixed(sub, self.subs[sub].cost(op))

    def check(self, workload: Workload) -> str | None:
        """The chip must be buildable (:meth:`physical`), and each sub-accelerator's part of
        the workload must fit it (its memory, its own limits)."""
        phys = self.physical()
        if phys is not None and phys.problem:
            return phys.problem
        for sub, names in self._parts(workload).items():
            design = self.subs[sub]
            part = workload if len(names) == len(workload) else sub_workload(workload, names)
            reason = design.check(part)
            if reason:
                return f"{sub}: {reason}"
        return None

    def plan(self, workload: Workload) -> Workload:
        """A sub-accelerator running the whole workload plans it; a split workload runs as
        captured (a plan may rename or replicate ops, which would break the assignment)."""
        parts = self._parts(workload)
        if len(parts) == 1:
            (sub,) = parts
            planned = self.subs[sub].plan(workload)
            if planned is not workload:
                self.assignment = {**self.assignment, **{op.name: sub for op in planned.ops}}
            return planned
        return workload

    def costs(self, workload: Workload) -> list[OpCost]:
        """Each sub-accelerator maps its own part at once (some templates partition a whole
        workload), then the costs are put back in ``workload.ops`` order."""
        by_name: dict[str, OpCost] = {}
        for sub, names in self._parts(workload).items():
            part = workload if len(names) == len(workload) else sub_workload(workload, names)
            for op, c in zip(part.ops, self.subs[sub].costs(part)):
                by_name[op.name] = self._prefixed(sub, c)
        return [by_name[op.name] for op in workload.ops]

    def resources(self) -> Resources:
        units: dict[str, int] = {}
        channels: dict[str, float] = {}
        for n, s in self.subs.items():
            r = s.resources()
            units.update({f"{n}{SEPARATOR}{u}": c for u, c in r.units.items()})
            channels.update({f"{n}{SEPARATOR}{c}": b for c, b in r.channels.items()})
        return Resources(units=units, channels=channels)

    def floorplan(self) -> Floorplan | None:
        """The sub-accelerators on one chip (:func:`accelerators.physical.combine`); None when
        a sub-accelerator's template does not model its silicon."""
        plans = [s.floorplan() for s in self.subs.values()]
        return combine(plans) if all(p is not None for p in plans) else None

    def area_mm2(self) -> float:
        if self.physical() is not None:
            return self.physical().area_mm2
        return sum(s.area_mm2() for s in self.subs.values())

    def static_power_w(self) -> float:
        if self.physical() is not None:
            return self.physical().static_w
        return sum(s.static_power_w() for s in self.subs.values())

    def describe(self) -> dict[str, Any]:
        return {"template": self.name, "preset": None,
                "subs": {n: s.describe() for n, s in self.subs.items()}}
