"""What every accelerator template is: parameters as data, and four questions.

A template answers (DESIGN.md): what does this op cost on me (:meth:`Template.cost`), what
resources do I offer the simulator (:meth:`Template.resources`), how big am I
(:meth:`Template.area_mm2`), what do I burn when idle (:meth:`Template.static_power_w`).
Templates know nothing of SimPy or Optuna.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Hashable, Mapping

from dse.errors import BadInput
from accelerators.capacity import capacity_problem
from accelerators.physical import Floorplan, Physical, assess
from workloads.ir import DTYPE_BYTES, Op, Workload
from workloads.memo import per_workload_bounded

#: Planned graphs kept per workload and template (:meth:`Template.planned`), the most recently
#: used: a search whose designs plan a workload many ways keeps only these [E: a population's
#: worth; each is a copy of the graph].
PLANS_PER_WORKLOAD = 64

#: Energy components of a result, J. ``static`` is added by the simulator (static power x time).
ENERGY_COMPONENTS = ("compute", "onchip_memory", "offchip_memory", "network", "static")


@dataclass(frozen=True)
class Param:
    """One hardware parameter: name, type, unit, default, allowed range or choices.

    ``low``/``high`` bound numbers (inclusive); ``choices`` lists the allowed values of a
    categorical; ``log`` says the search samples it on a log scale; ``step`` its int step.
    """

    name: str
    type: type
    unit: str
    default: Any
    description: str
    low: float | None = None
    high: float | None = None
    choices: tuple | None = None
    log: bool = False
    step: int | None = None

    def allowed(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        kind = {int: "an int", float: "a number", bool: "true or false", str: "a string"}[self.type]
        if self.low is not None and self.high is not None:
            return f"{kind} in [{self.low:g}, {self.high:g}]" + (f" {self.unit}" if self.unit else "")
        return kind

    def coerce(self, value: Any, field_name: str | None = None) -> Any:
        """Return ``value`` converted to this parameter's type, or raise :class:`BadInput`."""
        where = field_name or self.name
        v = value
        try:
            if self.type is bool:
                if isinstance(v, str):
                    low = v.strip().lower()
                    if low not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                        raise ValueError
                    v = low in ("true", "1", "yes", "on")
                elif not isinstance(v, bool):
                    raise ValueError
            elif self.type is int:
                if isinstance(v, bool):
                    raise ValueError
                if isinstance(v, str):
                    v = float(v.strip())
                if isinstance(v, float):
                    if not math.isfinite(v) or v != int(v) or abs(v) > 2**53:
                        raise ValueError
                    v = int(v)
                if not isinstance(v, int):
                    raise ValueError
            elif self.type is float:
                if isinstance(v, bool):
                    raise ValueError
                v = float(v.strip()) if isinstance(v, str) else float(v)
                if not math.isfinite(v):
                    raise ValueError
            elif self.type is str:
                if not isinstance(v, str):
                    raise ValueError
        except (TypeError, ValueError):
            raise BadInput(where, value, f"expected {self.allowed()}") from None
        if self.choices is not None and v not in self.choices:
            raise BadInput(where, value, f"expected {self.allowed()}")
        if self.low is not None and v < self.low or self.high is not None and v > self.high:
            raise BadInput(where, value, f"expected {self.allowed()}")
        return v

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type.__name__, "unit": self.unit,
                "default": self.default, "low": self.low, "high": self.high,
                "choices": list(self.choices) if self.choices else None, "log": self.log,
                "step": self.step, "description": self.description}


class HardwareConfig(Mapping[str, Any]):
    """Validated, read-only parameter values with attribute access (``hw.rows``)."""

    __slots__ = ("_values",)

    def __init__(self, values: Mapping[str, Any]):
        object.__setattr__(self, "_values", MappingProxyType(dict(values)))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("HardwareConfig is read-only")

    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"HardwareConfig({dict(self._values)!r})"


@dataclass(frozen=True)
class Resources:
    """What a template offers the simulator.

    ``units``: unit name -> how many ops it runs at once (an op holds one slot for its whole
    duration). ``channels``: shared memory channel or link name -> bandwidth, B/s; concurrent
    transfers on one channel share its bandwidth equally (fluid model).
    """

    units: Mapping[str, int]
    channels: Mapping[str, float]


@dataclass(frozen=True, slots=True)
class OpCost:
    """The cost of one op on one template, standalone (no contention).

    ``latency_s`` includes memory stalls and fixed overheads; ``compute_s`` is the unit busy
    with no memory stall. ``traffic`` is the bytes the op moves over each shared channel of
    :class:`Resources` (the simulator makes concurrent ops share them); ``bytes_by_level`` the
    bytes per memory level, for reporting. ``energy_j`` is dynamic energy by component (keys from
    ``ENERGY_COMPONENTS`` except ``static``). ``also_holds`` names further units held exclusively
    for the op's duration. ``details``: op-specific figures for the result (the tiles of a
    sparse attention op). The simulator reproduces ``latency_s`` exactly when nothing contends.
    """

    unit: str
    latency_s: float
    compute_s: float
    clock_hz: float
    traffic: Mapping[str, float] = field(default_factory=dict)
    bytes_by_level: Mapping[str, float] = field(default_factory=dict)
    energy_j: Mapping[str, float] = field(default_factory=dict)
    bound: str = "compute"
    also_holds: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cycles(self) -> float:
        """Latency in cycles of the unit's clock, with memory stalls."""
        return self.latency_s * self.clock_hz

    @property
    def compute_cycles(self) -> float:
        """Cycles the unit computes with no memory stall (the SCALE-Sim convention)."""
        return self.compute_s * self.clock_hz

    @property
    def total_energy_j(self) -> float:
        return sum(self.energy_j.values())


@dataclass(frozen=True)
class MemoryLevel:
    """One level of a design's memory, for floors (:mod:`simulators.floors`): its peak
    bandwidth (all its ports together), B/s; the bytes it holds; the cheapest energy of one
    byte read from it, J/B; and ``resident``: the workload's weights and KV cache live here
    when a step starts (the outermost level that holds them)."""

    name: str
    bandwidth_Bps: float
    capacity_bytes: float
    energy_j_per_byte: float
    resident: bool = False


@dataclass(frozen=True)
class Peaks:
    """The ceilings of one design for work in one dtype, what floors divide work by
    (:meth:`Template.peaks`).

    ``flops_per_s``: per simulator unit (:class:`Resources`), the most FLOP/s its datapaths
    reach on ops of that dtype (0: it computes none). ``levels``: its memory, outermost first
    (:class:`MemoryLevel`). ``energy_per_flop_j``: the cheapest dynamic energy one FLOP of the
    dtype can cost on this design (its cheapest datapath's MAC over 2, from
    :mod:`accelerators.technology`), J. Links and shared channels are the simulator's own
    (:meth:`Template.resources`)."""

    flops_per_s: Mapping[str, float]
    levels: tuple[MemoryLevel, ...]
    energy_per_flop_j: float

    @property
    def resident(self) -> MemoryLevel | None:
        """The level the weights and KV cache start in."""
        return next((lv for lv in self.levels if lv.resident), None)

    def inside(self, level: MemoryLevel) -> float:
        """Bytes the levels inside ``level`` hold (what may stay on chip between steps)."""
        i = self.levels.index(level)
        return sum(lv.capacity_bytes for lv in self.levels[i + 1:])


class Template(ABC):
    """Base of every accelerator template. Subclasses set ``name``, ``description``,
    ``PARAMS`` and optionally ``PRESETS``, and implement the four questions."""

    name: ClassVar[str]
    description: ClassVar[str]
    PARAMS: ClassVar[tuple[Param, ...]]
    PRESETS: ClassVar[dict[str, dict[str, Any]]] = {}
    DEFAULT_PRESET: ClassVar[str | None] = None
    #: Whether ``cost`` handles ``sparse_attention`` ops (skipping tiles); a template without
    #: it is given the dense attention each one stands for (no block-sparse kernel there).
    SPARSE_ATTENTION: ClassVar[bool] = False
    #: Whether a batch's decode attention costs what its request count and mean KV length say
    #: (all the serving cost model, ``simulators.iteration_cost``, passes). False where each
    #: request's own length matters (NeuPIMs: the busiest memory channel sets the time).
    DECODE_COST_BY_MEAN: ClassVar[bool] = True
    #: True for a design that is part of a larger chip (a heterogeneous design's
    #: sub-accelerator): :meth:`check` then leaves its die, package and power to the chip.
    embedded: bool = False

    def __init__(self, preset: str | None = None, **values: Any):
        params = self.params()
        preset = preset if preset is not None else self.DEFAULT_PRESET
        merged: dict[str, Any] = {p.name: p.default for p in self.PARAMS}
        if preset is not None:
            if preset not in self.PRESETS:
                raise BadInput("preset", preset, f"{self.name} presets are "
                               + (", ".join(sorted(self.PRESETS)) or "(none)"))
            merged.update(self.PRESETS[preset])
        for key, value in values.items():
            if key not in params:
                raise BadInput(f"hw.{key}", value, f"{self.name} parameters are "
                               + ", ".join(p.name for p in self.PARAMS))
            merged[key] = value
        self.preset = preset
        self.hw = HardwareConfig({k: params[k].coerce(v, f"hw.{k}") for k, v in merged.items()})
        problem = self.validate()
        if problem:
            raise BadInput(problem[0], problem[1], problem[2])

    @classmethod
    def params(cls) -> dict[str, Param]:
        return {p.name: p for p in cls.PARAMS}

    def validate(self) -> tuple[str, Any, str] | None:
        """Cross-parameter checks: return (field, value, what is allowed) or None."""
        return None

    @abstractmethod
    def cost(self, op: Op) -> OpCost:
        """The cost of ``op`` on this design; raise ``InfeasibleDesign`` if it cannot run."""

    def plan(self, workload: Workload) -> Workload:
        """The graph this design actually runs for ``workload`` (default: unchanged).

        Override to restructure execution, e.g. split a batch into pipelined sub-batches or
        replicate a per-batch graph across ray batches. The result must be a valid
        :class:`Workload` whose ops this template can cost.
        """
        return workload

    def plan_key(self, workload: Workload) -> Hashable | None:
        """What of this design :meth:`plan` reads for ``workload``: designs of one template
        with equal keys get the same planned graph, made once (:meth:`planned`). None (the
        default of a template that overrides :meth:`plan`): every design plans anew."""
        return None

    def planned(self, workload: Workload) -> Workload:
        """:meth:`plan` of ``workload``, shared by the designs with the same :meth:`plan_key`
        (kept beside ``workload``, the last :data:`PLANS_PER_WORKLOAD` of them)."""
        if type(self).plan is Template.plan:
            return workload
        key = self.plan_key(workload)
        if key is None:
            return self.plan(workload)
        return per_workload_bounded(workload, ("plan", type(self)), key,
                                    lambda: self.plan(workload), PLANS_PER_WORKLOAD)

    def costs(self, workload: Workload) -> list[OpCost]:
        """Costs of every op of ``workload`` in ``workload.ops`` order (override to map a whole
        workload at once, e.g. to partition across channels)."""
        return [self.cost(op) for op in workload.ops]

    @classmethod
    def op_contexts(cls, workload: Workload) -> list[Hashable] | None:
        """For a template that overrides :meth:`costs`: per op of ``workload.ops``, what its
        cost reads of the workload beyond the op itself (the same for every design), so
        that ``costs(workload)[i] == cost_in(ops[i], op_contexts(workload)[i])`` and ops with
        equal signatures and contexts cost the same. None: :meth:`costs` cannot be split so
        (the fast path then asks it for the whole graph)."""
        return None

    def cost_in(self, op: Op, context: Hashable) -> OpCost:
        """The cost of ``op`` in the ``context`` :meth:`op_contexts` gave it."""
        return self.cost(op)

    @abstractmethod
    def resources(self) -> Resources:
        """Units and shared channels offered to the simulator."""

    def floorplan(self) -> Floorplan | None:
        """What this design puts on silicon (:class:`accelerators.physical.Floorplan`): its
        laid-out compute and SRAM, their peak power and leakage, and its off-chip memory.
        :meth:`physical` adds memory PHYs, I/O, control, chiplets, package, cost and power
        the same way for every template. None: the template does not model its silicon (it
        must then implement :meth:`area_mm2` and :meth:`static_power_w` itself)."""
        return None

    def physical(self) -> Physical | None:
        """Area breakdown, cost, TDP and buildability of this design (computed once), or None
        when the template has no :meth:`floorplan`."""
        try:
            return self._physical_cache
        except AttributeError:
            fp = self.floorplan()
            self._physical_cache = assess(fp) if fp is not None else None
            return self._physical_cache

    def area_mm2(self) -> float:
        """Silicon area, mm^2: every die (and off-die logic) of :meth:`physical`."""
        phys = self.physical()
        if phys is None:
            raise NotImplementedError(f"{self.name} models neither floorplan() nor area_mm2()")
        return phys.area_mm2

    def static_power_w(self) -> float:
        """Leakage and always-on power (memory background included), W."""
        phys = self.physical()
        if phys is None:
            raise NotImplementedError(f"{self.name} models neither floorplan() nor "
                                      "static_power_w()")
        return phys.static_w

    def memory_capacity_bytes(self) -> float | None:
        """Bytes this design can hold a workload in: its off-chip memory by default (a
        template that keeps data on chip, like the wafer, says so); None: unchecked."""
        phys = self.physical()
        return phys.memory.capacity_bytes if phys is not None and phys.memory else None

    def memory_capacity_for(self, workload: Workload) -> float | None:
        """Bytes this design can hold ``workload`` in (:meth:`memory_capacity_bytes`; a
        template whose capacity depends on where the workload runs says so)."""
        return self.memory_capacity_bytes()

    def element_bytes(self, workload: Workload) -> int:
        """Bytes per element this design stores the workload's data in: its datapath
        format's whole bytes (:func:`accelerators.mac_formats.storage_bytes`, what the
        templates rescale a workload to), else the workload's own."""
        dtype = self.hw.get("dtype")
        if dtype in DTYPE_BYTES:
            return DTYPE_BYTES[dtype]
        if isinstance(dtype, str):
            from accelerators.mac_formats import storage_bytes
            try:
                return storage_bytes(dtype)
            except (BadInput, KeyError, ValueError):
                pass
        return workload.bytes_per_element

    def check(self, workload: Workload) -> str | None:
        """Why ``workload`` cannot run on this design at all, or None: the design cannot be
        built (:meth:`physical`'s problem), or the workload's weights, KV cache and live
        activations exceed :meth:`memory_capacity_bytes`. Templates that override this call
        it first."""
        phys = self.physical()
        if phys is not None and phys.problem and not self.embedded:
            return phys.problem
        problem = self.format_problem(workload)
        if problem:
            return problem
        capacity = self.memory_capacity_bytes()
        if capacity is None:
            return None
        return capacity_problem(workload, capacity, self.element_bytes(workload),
                                self.capacity_holder())

    def format_problem(self, workload: Workload) -> str | None:
        """Why this design's datapaths cannot run ``workload``'s number formats
        (:mod:`workloads.formats`), or None. The default reads a ``dtype`` parameter as the
        MAC unit's format (:func:`accelerators.mac_formats.workload_problem`); a template
        without one runs whatever it is given unless it overrides this."""
        unit = self.hw.get("dtype") if "dtype" in self.params() else None
        if unit is None:
            return None
        from accelerators.mac_formats import workload_problem
        return workload_problem(unit, workload)

    def capacity_holder(self) -> str:
        """What :meth:`memory_capacity_bytes` is, for messages."""
        phys = self.physical()
        mem = phys.memory if phys is not None else None
        if mem is None:
            return "the design"
        return (f"its memory ({mem.devices} {mem.standard.name} {mem.standard.device}"
                f"{'s' if mem.devices != 1 else ''} x {mem.capacity_gb_per_device:.3g} GB)")

    def unused_params(self) -> set[str]:
        """Parameters whose value this design ignores given its other values (e.g. a bandwidth
        target when the memory devices are counted); reports leave them out."""
        return set()

    def peaks(self, dtype: str) -> Peaks | None:
        """This design's peaks for work in ``dtype`` (:class:`Peaks`: FLOP/s per unit, memory
        levels, cheapest energy per FLOP), which :mod:`simulators.floors` divides work by;
        None: the template declares none (only its channels and physical model are checked)."""
        return None

    def describe(self) -> dict[str, Any]:
        out = {"template": self.name, "preset": self.preset, "hw": dict(self.hw)}
        phys = self.physical()
        if phys is not None and phys.memory is not None:
            out["memory"] = phys.memory.to_dict()
        if phys is not None:   # the chiplet split (chosen to cost least unless pinned)
            out["dies"], out["die_mm2"] = phys.dies, phys.die_mm2
        return out
