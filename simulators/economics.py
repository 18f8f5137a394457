"""What a served token costs: hardware and host amortised, energy at the facility, per token.

A serving run (:mod:`simulators.serving`) measures, over its span, the output tokens, the time
the accelerator spent running iterations (``busy_s``) and their dynamic energy. An operator
pays for every hour of the hardware's life whether it serves or not, so the cost of a token is

    US$ per hour = (hardware_usd + host_usd x devices) / (amortisation_years x 8,766 h)
                 + PUE x usd_per_kwh x (accelerator power + host_w x devices) / 1,000
    tokens per hour = tokens / busy_s x utilisation x 3,600
    accelerator power = dynamic energy / busy_s x utilisation + static power

``utilisation`` is the share of wall-clock hours the accelerator runs iterations at the
simulated load: by default what the run measured (``busy_s / span_s``: the trace's arrivals
leave it idle the rest of the time), never an assumed 100 %; give another to model a load that
runs only part of the day (the idle hours still pay for the hardware and its static power).

The defaults are a *cost to build and run*, not a price: the design's manufacturing cost
(``cost_usd``, :mod:`accelerators.physical`) and the host's build cost, what a cloud provider's
rental price adds its margin, data-centre building and staff to (docs/validation.md,
"Cost per token", compares both with published rental prices and API prices). Pass a purchase
price as ``hardware_usd`` to price a bought accelerator. Sources and confidence tags:

* ``amortisation_years`` 5 [P: servers' useful lives in 10-K filings, 2022-23: Amazon 5
  years, Meta 5, Microsoft and Alphabet 6 (summarised at shaulkoral.com, "Useful life of
  servers and network assets at tech companies")].
* ``host_usd`` 4,000 US$ per accelerator [R epoch-research/training-cost-trends, after
  SemiAnalysis' DGX H100 bill of materials: US$ 32,010 of CPUs, memory, storage, NICs,
  NVSwitch baseboard, chassis and power supplies per 8-GPU server].
* ``host_w`` 575 W per accelerator [D NVIDIA DGX H100 datasheet: 10.2 kW maximum for the
  server, of which 8 x 700 W are the GPUs; the rest shared by 8] — a maximum [E].
* ``pue`` 1.58 [P Uptime Institute Global Data Center Survey 2023: industry average PUE 1.58;
  hyperscale fleets report ~1.1].
* ``usd_per_kwh`` 0.0806 [D US EIA: average retail price to industrial consumers, 2023,
  8.06 US cents per kWh].
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from dse.errors import BadInput

HOURS_PER_YEAR = 8766.0   #: 365.25 days
YEAR_S = HOURS_PER_YEAR * 3600.0
#: Default amortisation period of hardware, years, and electricity price, US$/kWh (sources
#: in the module docstring); the one default every cost in the project uses.
AMORTISATION_YEARS = 5.0
USD_PER_KWH = 0.0806

#: Parameter -> (default, lowest allowed, highest allowed, unit) [sources in the docstring].
PARAMETERS: dict[str, tuple[float | None, float, float, str]] = {
    "utilisation": (None, 1e-6, 1.0, "share of hours serving (default: measured)"),
    "amortisation_years": (AMORTISATION_YEARS, 0.1, 50.0, "years"),
    "hardware_usd": (None, 0.0, 1e9, "US$ (default: the design's manufacturing cost)"),
    "host_usd": (4000.0, 0.0, 1e9, "US$ per accelerator"),
    "host_w": (575.0, 0.0, 1e5, "W per accelerator"),
    "pue": (1.58, 1.0, 5.0, "facility power over IT power"),
    "usd_per_kwh": (USD_PER_KWH, 0.0, 10.0, "US$/kWh"),
}


@dataclass(frozen=True)
class Economics:
    """The parameters of :func:`token_cost` (module docstring: meaning, defaults, sources);
    None: the default (``utilisation``: measured; ``hardware_usd``: the design's cost)."""

    utilisation: float | None = None
    amortisation_years: float = AMORTISATION_YEARS
    hardware_usd: float | None = None
    host_usd: float = 4000.0
    host_w: float = 575.0
    pue: float = 1.58
    usd_per_kwh: float = USD_PER_KWH

    def __post_init__(self):
        for name, (_, lo, hi, unit) in PARAMETERS.items():
            v = getattr(self, name)
            if v is None and PARAMETERS[name][0] is None:
                continue
            if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                    or not lo <= v <= hi):
                raise BadInput(f"economics.{name}", v, f"expected a number in [{lo:g}, {hi:g}]"
                               f" ({unit})")

    @classmethod
    def of(cls, values: "Economics | Mapping[str, Any] | None") -> "Economics":
        """An :class:`Economics` from itself, a dict of parameters (None values: defaults)
        or None; one :class:`BadInput` line for an unknown key."""
        if isinstance(values, Economics):
            return values
        values = dict(values or {})
        for k in values:
            if k not in PARAMETERS:
                raise BadInput(f"economics.{k}", values[k], "expected one of "
                               + ", ".join(PARAMETERS))
        return cls(**{k: v for k, v in values.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def usd_per_hour(econ: Economics, hardware_usd: float, accelerator_w: float,
                 devices: int = 1) -> dict[str, float]:
    """What owning and running ``devices`` accelerators costs an hour, US$/h, split into
    ``hardware`` (``hardware_usd`` amortised), ``host`` (``econ.host_usd`` a device, amortised)
    and ``energy`` (``accelerator_w`` plus ``econ.host_w`` a device, at the facility's PUE):
    the one formula of serving's cost per token, replicas', fleets' and disaggregated pools'
    run costs and a fleet design's default price (module docstring)."""
    hours = econ.amortisation_years * HOURS_PER_YEAR
    return {"hardware": hardware_usd / hours, "host": econ.host_usd * devices / hours,
            "energy": econ.pue * (accelerator_w + econ.host_w * devices) / 1000.0
            * econ.usd_per_kwh}


def run_usd(econ: Economics, hardware_usd: float, energy_j: float, span_s: float,
            devices: int = 1) -> float:
    """What a run of ``span_s`` seconds on ``devices`` accelerators worth ``hardware_usd``
    that drew ``energy_j`` (accelerators only) costs, US$ (:func:`usd_per_hour` over the
    span)."""
    if span_s <= 0:
        return 0.0
    return sum(usd_per_hour(econ, hardware_usd, energy_j / span_s, devices).values()) \
        * span_s / 3600.0


def token_cost(econ: Economics, tokens: int, span_s: float, busy_s: float,
               dynamic_energy_j: float, static_w: float, cost_usd: float,
               devices: int = 1) -> dict[str, Any]:
    """US$ per million output tokens of a serving run (module docstring) and how it splits:
    ``cost_per_mtok_usd``, ``usd_per_hour`` (``hardware``, ``host``, ``energy``),
    ``tokens_per_hour``, ``utilisation`` (used) and ``utilisation_measured``, ``power_w``
    (accelerator and host, at the wall before the PUE), and the parameters."""
    measured = busy_s / span_s if span_s > 0 else 0.0
    u = econ.utilisation if econ.utilisation is not None else measured
    hardware = econ.hardware_usd if econ.hardware_usd is not None else cost_usd
    accel_w = (dynamic_energy_j / busy_s * u if busy_s > 0 else 0.0) + static_w
    host_w = econ.host_w * devices
    per_hour = usd_per_hour(econ, hardware, accel_w, devices)
    tokens_per_hour = tokens / busy_s * u * 3600.0 if busy_s > 0 else 0.0
    total = sum(per_hour.values())
    return {"cost_per_mtok_usd": total / tokens_per_hour * 1e6 if tokens_per_hour > 0
            else float("nan"),
            "usd_per_hour": per_hour, "tokens_per_hour": tokens_per_hour,
            "utilisation": u, "utilisation_measured": measured,
            "power_w": {"accelerator": accel_w, "host": host_w},
            "hardware_usd": hardware, "parameters": econ.to_dict()}
