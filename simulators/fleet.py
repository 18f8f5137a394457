"""Heterogeneous fleets: the cheapest mix of device types that serves a workload within its
SLOs, and which request sizes go where, solved as Mélange does [P Griggs et al., "Mélange:
Cost Efficient Large Language Model Serving by Exploiting GPU Heterogeneity", 2024, Sec. 5;
R tyler-griggs/melange-release melange/solver.py].

1. **Buckets.** Requests are grouped by prompt and output length (log-spaced edges,
   :data:`INPUT_EDGES` x :data:`OUTPUT_EDGES`); each bucket's share of the traffic and its
   mean lengths describe it.
2. **Profiles.** For each device type of the menu and each bucket, the highest arrival rate one
   instance sustains with requests of that bucket's lengths within the SLOs (:func:`profile`):
   vLLM-style continuous batching in steady state (:func:`steady_state`: decode iterations of
   ``B`` requests priced by the device's iteration cost model, prompts prefilled between them,
   Little's law closing ``B``), searched by :func:`simulators.rate_search.max_rate`. Mélange
   measures the same on real GPUs with vLLM [R melange/profiling/gpu-benchmark.py]; a
   steady-state model gives it in milliseconds where a simulated sweep per bucket would take
   minutes (a run must hold several times the batch limit of requests to show overload), and
   the fleet's simulation (step 4) checks the tails it leaves out.
3. **Integer program.** Each bucket's rate is cut into ``slice_factor`` slices (Mélange: "4 is
   sufficient"); binary ``x[s, g]`` sends slice ``s`` to type ``g``, integer ``y[g]`` counts
   instances of type ``g``; minimise ``sum_g price_g y_g`` subject to every slice going to one
   type and each type's load ``sum_s x[s, g] rate_s / max_rate[s, g] <= y_g`` (a bin packing of
   load slices into devices). Solved with HiGHS through :func:`scipy.optimize.milp` (a
   maintained branch-and-cut solver; scipy is already a dependency, so no new one: Mélange uses
   PuLP with CBC).
4. **Confirmation.** The chosen fleet serves the trace: each request goes to a device type by
   its bucket's routing weights (a deterministic proportional split), then to the type's
   instance with the least work assigned (:func:`simulators.replicas.route_least_work`), and
   every instance is simulated (:func:`simulators.replicas.serve_instances`).

The fleet's cost is the sum over types of instances x price (US$/h; tested). Each type's cheapest
single-type fleet (``ceil`` of its load, when it can serve every bucket) is the baseline the
saving is measured against, as in Mélange's Sec. 6.
"""

from __future__ import annotations

import json
import math
import time as _time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from dse.errors import BadInput, DSEError
from simulators.rate_search import max_rate
from simulators.replicas import Outcome, route_least_work, serve_instances
from workloads.traces import Trace

#: Prompt-length bucket edges, tokens: [1, 64), [64, 256), [256, 1024), [1024, 4096),
#: [4096, ...) [E: log-4 spacing; Mélange's profiles step 25, 100, 250, 500, 1000, 2000].
INPUT_EDGES = (1, 64, 256, 1024, 4096)
#: Output-length bucket edges, tokens (as :data:`INPUT_EDGES`).
OUTPUT_EDGES = (1, 64, 256, 1024)
#: Slices per bucket [R melange-release README: "4 is sufficient for most cases"].
SLICE_FACTOR = 4
#: Share of requests the simulated fleet must keep within the SLOs to confirm the plan [E:
#: Mélange reports >= 99.5 % of requests within the TPOT SLO in its evaluation].
ATTAINMENT = 0.99
#: HiGHS time limit, s.
SOLVER_TIME_LIMIT_S = 60.0


@dataclass(frozen=True)
class Bucket:
    """Requests with prompts in ``input_range`` and outputs in ``output_range`` (tokens,
    [low, high)); ``share`` of all requests; ``input_len`` / ``output_len`` their mean
    lengths (tokens), the size profiled."""

    input_range: tuple[int, int]
    output_range: tuple[int, int]
    share: float
    input_len: int
    output_len: int

    @property
    def label(self) -> str:
        (a, b), (c, d) = self.input_range, self.output_range
        hi = (lambda x: "inf" if x >= 1 << 30 else str(x))
        return f"in[{a},{hi(b)})xout[{c},{hi(d)})"


def bucketize(input_len: np.ndarray, output_len: np.ndarray,
              input_edges: tuple[int, ...] = INPUT_EDGES,
              output_edges: tuple[int, ...] = OUTPUT_EDGES) -> tuple[list[Bucket], np.ndarray]:
    """The non-empty buckets of a request sample and each request's bucket index."""
    for name, edges in (("input_edges", input_edges), ("output_edges", output_edges)):
        if (not isinstance(edges, (list, tuple)) or len(edges) < 1
                or any(isinstance(e, bool) or not isinstance(e, int) for e in edges)
                or edges[0] != 1 or any(b <= a for a, b in zip(edges, edges[1:]))):
            raise BadInput(name, edges, "expected increasing ints starting at 1, tokens")
    ie = np.asarray(list(input_edges) + [1 << 40])
    oe = np.asarray(list(output_edges) + [1 << 40])
    bi = np.searchsorted(ie, input_len, side="right") - 1
    bo = np.searchsorted(oe, output_len, side="right") - 1
    key = bi * len(oe) + bo
    buckets, which = [], np.full(len(input_len), -1, dtype=np.int64)
    n = len(input_len)
    for j, k in enumerate(np.unique(key)):
        m = key == k
        i, o = divmod(int(k), len(oe))
        buckets.append(Bucket((int(ie[i]), int(min(ie[i + 1], 1 << 30))),
                              (int(oe[o]), int(min(oe[o + 1], 1 << 30))), float(m.sum()) / n,
                              max(1, int(round(float(input_len[m].mean())))),
                              max(1, int(round(float(output_len[m].mean()))))))
        which[m] = j
    return buckets, which


@dataclass
class MenuDevice:
    """One device type of the menu: ``name``, ``price_usd_per_h``, its iteration cost model
    (None when it cannot serve the model: ``unusable`` says why), its description."""

    name: str
    price_usd_per_h: float
    cost: Any
    unusable: str | None = None
    describe: dict[str, Any] = field(default_factory=dict)


_PROFILES: dict[str, float] = {}


def steady_state(cost, input_len: int, output_len: int, rate: float, max_batch: int = 256,
                 token_budget: int = 2048, kv_tokens: int | None = None,
                 _memo: dict | None = None) -> dict[str, float] | None:
    """Continuous batching (prefill first, vLLM v0) of requests of one size at ``rate``
    requests/s, in steady state. A cycle is one decode iteration of the ``B`` requests decoding
    (``d(B)``, the cost model at the mean context ``input + output / 2``) and one prefill
    iteration of the ``m`` prompts that arrived during the previous cycle (``p(m)``, at most
    ``token_budget`` tokens), so ``m = rate (d(B) + p(m))``; prefills take a share ``rho = rate
    p(m) / m`` of the time, each decoding request gains one token per cycle, ``TPOT = d(B) /
    (1 - rho)``, and Little's law closes it: ``B = rate (output - 1) TPOT``. Solved by
    fixed-point iteration (``d`` and ``p`` interpolated between whole counts). Returns TPOT,
    TTFT (a cycle's wait plus the prompt's own prefill), ``B``, ``m`` and ``rho`` (s, s,
    requests, prompts, share), or None when the instance cannot keep up (``rho >= 1``, or
    ``B`` past ``max_batch`` or what the KV cache holds at the requests' mean length)."""
    memo = {} if _memo is None else _memo
    ctx = input_len + output_len // 2
    cap = float(max_batch)
    if kv_tokens is not None:
        cap = min(cap, kv_tokens / (input_len + output_len / 2))
    m_max = max(1.0, float(token_budget // input_len))

    def interp(key: str, x: float, f) -> float:
        lo = max(1, int(x))
        frac = min(max(x - lo, 0.0), 1.0)
        vals = []
        for k in ((lo, lo + 1) if frac > 0 else (lo,)):
            if (key, k) not in memo:
                memo[(key, k)] = f(k)
            vals.append(memo[(key, k)])
        return vals[0] + frac * (vals[-1] - vals[0])

    def d(b: float) -> float:
        return interp("d", b, lambda k: cost.cost(
            k, k * ctx, kv_lens=[ctx] * k if cost.per_request else None)[0])

    def p(m: float) -> float:
        return interp("p", m, lambda k: cost.cost(0, 0, [(0, input_len)] * k)[0])

    if output_len <= 1:
        rho = rate * p(1.0)
        return None if rho >= 1 else {"tpot_s": 0.0, "ttft_s": p(1.0), "batch": 0.0,
                                      "prompts": 1.0, "rho": rho}
    b, m = 1.0, 1.0
    for _ in range(400):
        nm = min(m_max, max(1.0, rate * (d(b) + p(m))))
        rho = rate * p(nm) / nm
        if rho >= 1.0:
            return None
        nb = rate * (output_len - 1) * d(b) / (1.0 - rho)
        if nb > cap:
            return None
        done = abs(nb - b) <= 1e-4 * max(b, 1.0) and abs(nm - m) <= 1e-4 * m
        b, m = nb, nm
        if done:
            break
    else:
        return None                               # no fixed point: B grows without bound
    return {"tpot_s": d(b) / (1.0 - rho), "ttft_s": d(b) + 2.0 * p(m), "batch": b,
            "prompts": m, "rho": rho}


def profile(cost, bucket: Bucket, slo_tpot_s: float | None, slo_ttft_s: float | None,
            max_batch: int = 256, token_budget: int = 2048,
            memory_utilization: float = 0.9) -> float:
    """The highest rate (requests/s) one instance of ``cost``'s target sustains with
    requests of ``bucket``'s lengths within the SLOs, by :func:`steady_state` (vLLM-style
    continuous batching in steady state; the fleet's simulation then checks the tails); 0.0
    when even an unloaded instance misses them or its cache cannot hold one request. Kept
    for the process."""
    key = json.dumps([id(cost.base), cost.target.describe(), cost.max_tokens,
                      bucket.input_len, bucket.output_len, slo_tpot_s, slo_ttft_s, max_batch,
                      token_budget, memory_utilization], sort_keys=True, default=str)
    hit = _PROFILES.get(key)
    if hit is not None:
        return hit
    kv = cost.kv_capacity_tokens(memory_utilization)
    i, o = bucket.input_len, bucket.output_len
    memo: dict = {}

    def ok(rate: float) -> bool:
        st = steady_state(cost, i, o, rate, max_batch, token_budget, kv, memo)
        return st is not None and (slo_tpot_s is None or st["tpot_s"] <= slo_tpot_s) and (
            slo_ttft_s is None or st["ttft_s"] <= slo_ttft_s)

    if i + o > min(kv, cost.max_tokens):
        rate = 0.0
    else:
        mid = i + o // 2
        alone_s = cost.cost(0, 0, [(0, i)])[0] + (o - 1) * cost.cost(
            1, mid, kv_lens=[mid] if cost.per_request else None)[0]
        serial = 1.0 / alone_s
        rate = max_rate(ok, serial, low_limit=serial / 1000.0) if ok(serial / 1000.0) else 0.0
    _PROFILES[key] = rate
    return rate


@dataclass
class FleetResult:
    """The chosen fleet: instances per device type (``counts``), its cost (US$/h, the sum of
    instances x price), the routing (per bucket, the share of its requests each type serves),
    each type's sustained rate per bucket (``max_rate``, requests/s per instance), its load
    (instances' worth) and utilisation, the single-type baselines (instances and US$/h, None
    when the type cannot serve every bucket), the saving against the cheapest of them, the
    solver's report and, when confirmed, the simulated outcome's summary."""

    model: str
    rate: float
    slo: dict[str, float | None]
    buckets: list[Bucket]
    menu: list[dict[str, Any]]
    counts: dict[str, int]
    cost_usd_per_h: float
    routing: dict[str, dict[str, float]]
    max_rate: dict[str, dict[str, float]]
    load: dict[str, float]
    single: dict[str, dict[str, float] | None]
    best_single: str | None
    saving: float | None
    solver: dict[str, Any]
    confirm: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "rate_req_s": self.rate, "slo": self.slo,
                "buckets": [{"label": b.label, "share": b.share, "input_len": b.input_len,
                             "output_len": b.output_len} for b in self.buckets],
                "menu": self.menu, "counts": self.counts, "cost_usd_per_h": self.cost_usd_per_h,
                "routing": self.routing, "max_rate_req_s": self.max_rate, "load": self.load,
                "single_type": self.single, "best_single_type": self.best_single,
                "saving_vs_best_single": self.saving, "solver": self.solver,
                "confirm": self.confirm}

    def metrics(self) -> dict[str, float]:
        """Scalar metrics a study can optimise or constrain."""
        c = self.confirm or {}
        return {"fleet_cost_usd_per_h": self.cost_usd_per_h,
                "fleet_devices": float(sum(self.counts.values())),
                "saving_vs_best_single": (self.saving if self.saving is not None
                                          else float("nan")),
                "slo_attainment": float(c.get("slo_attainment", float("nan"))),
                "ttft_p99_s": float(c.get("ttft_s", {}).get("p99", float("nan"))),
                "tpot_p99_s": float(c.get("tpot_s", {}).get("p99", float("nan")))}


def solve(buckets: list[Bucket], rate: float, devices: list[MenuDevice],
          rates: np.ndarray, slice_factor: int = SLICE_FACTOR) -> dict[str, Any]:
    """Mélange's integer program (see the module docstring) over ``rates[b, g]`` (requests/s
    one instance of device ``g`` sustains in bucket ``b``, 0: cannot): instances per type,
    each slice's type, and the solver's status."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    if isinstance(slice_factor, bool) or not isinstance(slice_factor, int) \
            or not 1 <= slice_factor <= 64:
        raise BadInput("slice_factor", slice_factor, "expected an int in [1, 64]")
    B, G = rates.shape
    S = B * slice_factor
    slice_rate = np.repeat([b.share * rate for b in buckets], slice_factor) / slice_factor
    srates = np.repeat(rates, slice_factor, axis=0)               # (S, G)
    can = srates > 0
    load = np.where(can, slice_rate[:, None] / np.where(can, srates, 1.0), 0.0)
    nx = S * G
    price = np.array([d.price_usd_per_h for d in devices])
    c = np.concatenate([np.zeros(nx), price])
    a_eq = np.zeros((S, nx + G))
    for s in range(S):
        a_eq[s, s * G:(s + 1) * G] = 1.0
    a_cap = np.zeros((G, nx + G))
    for g in range(G):
        a_cap[g, g:nx:G] = load[:, g]
        a_cap[g, nx + g] = -1.0
    ub_y = np.ceil(load.sum(axis=0)) + 1.0
    ub = np.concatenate([can.astype(float).ravel(), ub_y])
    started = _time.perf_counter()
    res = milp(c, integrality=np.ones(nx + G),
               bounds=Bounds(np.zeros(nx + G), ub),
               constraints=[LinearConstraint(a_eq, 1.0, 1.0),
                            LinearConstraint(a_cap, -np.inf, 0.0)],
               options={"time_limit": SOLVER_TIME_LIMIT_S, "mip_rel_gap": 1e-9})
    wall = _time.perf_counter() - started
    if res.x is None:
        raise DSEError(f"the fleet solver found no allocation ({res.message})")
    x = np.rint(res.x[:nx]).reshape(S, G).astype(bool)
    y = np.rint(res.x[nx:]).astype(int)
    return {"x": x, "y": y, "load": load, "status": res.message, "wall_s": wall,
            "mip_gap": float(getattr(res, "mip_gap", 0.0) or 0.0),
            "objective": float(res.fun), "variables": nx + G}


def split_by_weights(which: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """For each request (its bucket in ``which``), a type index such that, in arrival order,
    every bucket's requests are shared among types as ``weights[bucket]`` says (each request to
    the type furthest behind its share: a deterministic proportional split)."""
    B, G = weights.shape
    given = np.zeros((B, G))
    seen = np.zeros(B)
    out = np.empty(len(which), dtype=np.int64)
    for i, b in enumerate(which):
        seen[b] += 1
        g = int(np.argmax(weights[b] * seen[b] - given[b] - 1e9 * (weights[b] <= 0)))
        given[b, g] += 1
        out[i] = g
    return out


def check_routing(routing: Any, buckets: list[Bucket], names: list[str]) -> np.ndarray:
    """Routing weights (``{bucket label or "*": {device: weight}}``) as a (bucket, type)
    array; each bucket's weights must be >= 0 and sum to 1."""
    if not isinstance(routing, dict) or not routing:
        raise BadInput("routing", routing, "expected a mapping of bucket label (or *) to "
                       "{device: weight}")
    labels = [b.label for b in buckets]
    w = np.zeros((len(buckets), len(names)))
    for key, weights in routing.items():
        field_name = f"routing.{key}"
        if key != "*" and key not in labels:
            raise BadInput(field_name, key, "expected * or a bucket label: " + ", ".join(labels))
        if not isinstance(weights, dict) or not weights:
            raise BadInput(field_name, weights, "expected {device: weight}")
        row = np.zeros(len(names))
        for dev, v in weights.items():
            if dev not in names:
                raise BadInput(f"{field_name}.{dev}", v, "expected a device of the menu: "
                               + ", ".join(names))
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1:
                raise BadInput(f"{field_name}.{dev}", v, "expected a weight in [0, 1]")
            row[names.index(dev)] = float(v)
        if abs(row.sum() - 1.0) > 1e-6:
            raise BadInput(field_name, weights, f"expected weights summing to 1, they sum to "
                           f"{row.sum():.6g}")
        for i, label in enumerate(labels):
            if key == "*" or key == label:
                w[i] = row
    return w


def simulate_fleet(devices: list[MenuDevice], counts: dict[str, int], weights: np.ndarray,
                   trace: Trace, which: np.ndarray, slo_ttft_s: float | None,
                   slo_tpot_s: float | None, scheduler: Callable[[], Any],
                   memory_utilization: float = 0.9) -> Outcome:
    """Serve ``trace`` (each request's bucket in ``which``) on ``counts`` instances per device
    type, routed by ``weights`` (bucket x type): see the module docstring, step 4."""
    from simulators.serving import simulate_serving
    kind = split_by_weights(which, weights)
    flat: list[MenuDevice] = []
    assignment = np.full(len(trace), -1, dtype=np.int64)
    for g, d in enumerate(devices):
        n = counts.get(d.name, 0)
        mask = kind == g
        if not mask.any():
            flat.extend([d] * n)
            continue
        if n < 1 or d.cost is None:
            raise BadInput(f"counts.{d.name}", n, "expected >= 1 instance of a usable device "
                           "for the requests routed to it")
        local = route_least_work(trace.input_len[mask], trace.output_len[mask], n)
        assignment[mask] = len(flat) + local
        flat.extend([d] * n)
    return serve_instances(
        trace, assignment,
        lambda k, tr: simulate_serving(flat[k].cost, tr, scheduler(),
                                       memory_utilization=memory_utilization),
        len(flat), lambda k: flat[k].cost.static_w if flat[k].cost else 0.0,
        lambda k: flat[k].cost.target.cost_usd() if flat[k].cost else 0.0,
        lambda k: flat[k].cost.target.devices if flat[k].cost else 0)


def fleet_cost_usd_per_h(counts: dict[str, int], devices: list[MenuDevice]) -> float:
    """Sum over device types of instances x price, US$/h."""
    price = {d.name: d.price_usd_per_h for d in devices}
    return float(sum(n * price[name] for name, n in counts.items()))


def plan_fleet(devices: list[MenuDevice], buckets: list[Bucket], rate: float,
               slo_tpot_s: float | None, slo_ttft_s: float | None,
               attainment: float = ATTAINMENT, slice_factor: int = SLICE_FACTOR,
               max_batch: int = 256, model: str = "") -> FleetResult:
    """Profile every usable device on every bucket, solve the integer program, and describe
    the fleet (not yet simulated: see :func:`simulate_fleet`)."""
    usable = [d for d in devices if d.cost is not None]
    if not usable:
        raise BadInput("menu", [d.name for d in devices], f"expected at least one device that "
                       f"can hold {model or 'the model'}: "
                       + "; ".join(f"{d.name}: {d.unusable}" for d in devices))
    rates = np.zeros((len(buckets), len(devices)))
    for g, d in enumerate(devices):
        if d.cost is None:
            continue
        for b, bucket in enumerate(buckets):
            rates[b, g] = profile(d.cost, bucket, slo_tpot_s, slo_ttft_s, max_batch)
    for b, bucket in enumerate(buckets):
        if not (rates[b] > 0).any():
            field_name = "slo_tpot_s" if slo_tpot_s is not None else "slo_ttft_s"
            raise BadInput(field_name, slo_tpot_s if slo_tpot_s is not None else slo_ttft_s,
                           f"expected SLOs some device of the menu meets for requests of "
                           f"{bucket.input_len} prompt / {bucket.output_len} output tokens "
                           f"({bucket.label}, {100 * bucket.share:.2g} % of requests); none "
                           f"does, even unloaded")
    sol = solve(buckets, rate, devices, rates, slice_factor)
    x, y, load = sol["x"], sol["y"], sol["load"]
    names = [d.name for d in devices]
    counts = {names[g]: int(y[g]) for g in range(len(devices)) if y[g] > 0}
    routing = {}
    for b, bucket in enumerate(buckets):
        part = x[b * slice_factor:(b + 1) * slice_factor].sum(axis=0) / slice_factor
        routing[bucket.label] = {names[g]: float(part[g]) for g in range(len(devices))
                                 if part[g] > 0}
    used = {names[g]: float((load[:, g] * x[:, g]).sum()) for g in range(len(devices))
            if y[g] > 0}
    single: dict[str, dict[str, float] | None] = {}
    for g, d in enumerate(devices):
        if d.cost is None or not (rates[:, g] > 0).all():
            single[d.name] = None
            continue
        n = int(math.ceil(load[:, g].sum() - 1e-9))
        single[d.name] = {"instances": n, "cost_usd_per_h": n * d.price_usd_per_h}
    priced = {k: v["cost_usd_per_h"] for k, v in single.items() if v is not None}
    best = min(priced, key=priced.get) if priced else None
    cost = fleet_cost_usd_per_h(counts, devices)
    return FleetResult(
        model=model, rate=rate, slo={"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s,
                                     "attainment": attainment},
        buckets=buckets,
        menu=[{"name": d.name, "price_usd_per_h": d.price_usd_per_h, "unusable": d.unusable,
               "target": d.describe} for d in devices],
        counts=counts, cost_usd_per_h=cost, routing=routing,
        max_rate={names[g]: {bk.label: float(rates[b, g]) for b, bk in enumerate(buckets)}
                  for g in range(len(devices)) if devices[g].cost is not None},
        load={k: v for k, v in used.items()}, single=single, best_single=best,
        saving=(1.0 - cost / priced[best]) if best else None,
        solver={"solver": "HiGHS (scipy.optimize.milp)", "status": sol["status"],
                "wall_s": sol["wall_s"], "mip_gap": sol["mip_gap"],
                "variables": sol["variables"], "slice_factor": slice_factor})
