"""The Python entry points of the serving questions past one server: disaggregated prefill and
decode pools, heterogeneous fleets, speculative decoding (re-exported by :mod:`dse.api`).

>>> from dse import api
>>> d = api.serve_disaggregated("llama2-7b", prefill={"accelerator": "gpu:a100", "count": 2},
...                             decode={"accelerator": "gpu:a100", "count": 1},
...                             link="nvlink3", links=12, rate=4, requests=500)
>>> f = api.fleet("llama2-7b", menu=[{"name": "a10g", "accelerator": "gpu:a10g",
...                                   "price_usd_per_h": 1.01}, ...], trace="arena", rate=8,
...               slo_tpot_s=0.12)
>>> s = api.speculate("llama2-7b", draft="tinyllama-1.1b", k=4, acceptance=0.8,
...                   accelerator="gpu:h100")
"""

from __future__ import annotations

import math
from typing import Any

from dse.errors import BadInput

#: Keys a pool (or a fleet menu entry) takes, as :func:`dse.api.serve` takes them.
TARGET_KEYS = ("accelerator", "hw", "system", "devices", "parallel", "sys")
POOL_KEYS = TARGET_KEYS + ("count", "max_batch", "token_budget")


def check_mapping(field: str, value: Any, allowed: tuple[str, ...]) -> dict[str, Any]:
    """``value`` as a dict whose keys are all in ``allowed``; one :class:`BadInput` line
    naming the first stray key otherwise."""
    if not isinstance(value, dict):
        raise BadInput(field, value, "expected a mapping with keys " + ", ".join(allowed))
    for k in value:
        if k not in allowed:
            raise BadInput(f"{field}.{k}", value[k], "expected one of the keys "
                           + ", ".join(allowed))
    return value


def target_of(field: str, spec: dict[str, Any], fidelity: str = "fast"):
    """The :class:`~simulators.iteration_cost.Target` a pool or menu entry describes: a design
    (``accelerator``, ``hw``) or a system (``system``, ``devices``, ``parallel``, ``sys``)."""
    from dse import api
    try:
        return api._target(spec.get("accelerator"), spec.get("hw"), spec.get("system"),
                           spec.get("devices"), spec.get("parallel"), spec.get("sys"),
                           fidelity)
    except BadInput as exc:
        raise BadInput(f"{field}.{exc.field}", exc.value, exc.allowed) from None


def cost_model_of(field: str, spec: dict[str, Any], base, max_tokens: int,
                  fidelity: str = "fast"):
    """The iteration cost model of ``base`` on the target ``spec`` describes (kept for the
    process, as :func:`dse.api.serve` keeps them)."""
    from dse import api
    return api._cost_model(base, target_of(field, spec, fidelity), max_tokens)


def serve_disaggregated(model, prefill: dict[str, Any], decode: dict[str, Any],
                        link: str = "nvlink4", links: int = 1, trace: str = "sharegpt",
                        rate: float | None = None, requests: int | None = None,
                        duration_s: float | None = None, arrival: str = "poisson",
                        burstiness: float = 1.0, seed: int = 0,
                        slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                        dtype: str = "bf16", arch: dict[str, Any] | None = None,
                        memory_utilization: float = 0.9, fidelity: str = "fast"):
    """Serve a trace (as :func:`dse.api.serve` takes it) of zoo ``model`` on a prefill pool and
    a decode pool joined by ``links`` links of standard ``link`` (``nvlink3``, ``nvlink4``,
    ``pcie5x16``, ``ib_ndr``, ...; :mod:`simulators.disaggregated`). Each pool is a mapping:
    ``count`` instances (>= 1) of a design (``accelerator``, ``hw``) or of a system
    (``system``, ``devices``, ``parallel``, ``sys``), with ``max_batch`` requests and (prefill)
    ``token_budget`` prompt tokens per iteration. Returns a
    :class:`~simulators.disaggregated.DisaggregatedResult` (``summary()``: TTFT / TPOT
    percentiles, goodput and goodput per device, KV bytes written and moved, transfer times).
    """
    from dse import api
    from simulators.disaggregated import KVLink, PoolModel, check_count, simulate_disaggregated
    from workloads.traces import trace_from
    if requests is None and duration_s is None:
        requests = 1000
    tr = trace_from(trace, rate, requests, duration_s, arrival, burstiness, seed)
    base = api._iteration_base(model, dtype, arch)
    pools = []
    for name, spec, default_budget in (("prefill", prefill, 2048), ("decode", decode, 0)):
        check_mapping(name, spec, POOL_KEYS)
        count = check_count(f"{name}.count", spec.get("count", 1))
        max_batch = spec.get("max_batch", 256)
        budget = spec.get("token_budget", default_budget)
        for key, v in (("max_batch", max_batch), ("token_budget", budget)):
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1 << 20 \
                    or (key == "max_batch" and v < 1):
                raise BadInput(f"{name}.{key}", v, "expected an int in [1, 1048576]")
        need = (max(budget, int(tr.input_len.max())) if name == "prefill" else max_batch)
        cost = cost_model_of(name, spec, base, need, fidelity)
        pools.append(PoolModel(cost, count, max_batch, budget or max_batch))
    return simulate_disaggregated(pools[0], pools[1], KVLink.of(link, links), tr,
                                  slo_ttft_s, slo_tpot_s, memory_utilization)


def _positive(field: str, value: Any, high: float = 1e9) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not 0 < value <= high:
        raise BadInput(field, value, f"expected a number in (0, {high:g}]")
    return float(value)


def derived_price_usd_per_h(target, economics: Any = None) -> float:
    """A device's price when the menu gives none: what owning and running it an hour costs at
    its TDP (:func:`simulators.economics.usd_per_hour`: its manufacturing cost (die, memory,
    package: :mod:`accelerators.physical`) and its hosts amortised, energy at the facility),
    US$/h: a cost to build and run, not a cloud price (give ``price_usd_per_h`` to compare with
    rented GPUs). ``economics``: :class:`simulators.economics.Economics` or a dict of its
    parameters (default: the project's defaults)."""
    from simulators.economics import Economics, usd_per_hour
    phys = (target.design or target.system).physical()
    if phys is None or not math.isfinite(float(phys.cost_usd)):
        raise BadInput("price_usd_per_h", None, f"expected a price: {target.device.name} "
                       "models no cost")
    econ = Economics.of(economics)
    hardware = econ.hardware_usd if econ.hardware_usd is not None else float(phys.cost_usd)
    return sum(usd_per_hour(econ, hardware, phys.tdp_w, target.devices).values())


def menu_devices(menu: Any, base, max_tokens: int, memory_utilization: float = 0.9,
                 fidelity: str = "fast") -> list:
    """The :class:`~simulators.fleet.MenuDevice` of each menu entry (``name``,
    ``price_usd_per_h`` (default: :func:`derived_price_usd_per_h`) and a design or system as
    a pool takes it); a device whose memory cannot hold the model is kept, unusable, with the
    reason."""
    from dse.errors import InfeasibleDesign
    from simulators.fleet import MenuDevice
    if not isinstance(menu, (list, tuple)) or not menu:
        raise BadInput("menu", menu, "expected a list of devices, each {name, "
                       "price_usd_per_h, accelerator | system, ...}")
    if len(menu) > 32:
        raise BadInput("menu", len(menu), "expected at most 32 device types")
    out, names = [], []
    for i, entry in enumerate(menu):
        field = f"menu[{i}]"
        check_mapping(field, entry, ("name", "price_usd_per_h") + TARGET_KEYS)
        name = entry.get("name")
        if not isinstance(name, str) or not name or name in names or len(name) > 64:
            raise BadInput(f"{field}.name", name, "expected a name of its own (a string)")
        names.append(name)
        target = target_of(field, entry, fidelity)
        price = entry.get("price_usd_per_h")
        price = (_positive(f"{field}.price_usd_per_h", price, 1e6) if price is not None
                 else derived_price_usd_per_h(target))
        from dse import api
        try:
            cost = api._cost_model(base, target, max_tokens)
            cost.kv_capacity_tokens(memory_utilization)
            out.append(MenuDevice(name, price, cost, None, target.describe()))
        except InfeasibleDesign as exc:
            out.append(MenuDevice(name, price, None, exc.reason, target.describe()))
    return out


def fleet(model, menu: list[dict[str, Any]], trace: str = "arena", rate: float | None = None,
          requests: int | None = None, duration_s: float | None = None,
          arrival: str = "poisson", burstiness: float = 1.0, seed: int = 0,
          slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
          attainment: float | None = None, input_edges: tuple[int, ...] | None = None,
          output_edges: tuple[int, ...] | None = None, slice_factor: int | None = None,
          counts: dict[str, int] | None = None, routing: dict[str, Any] | None = None,
          confirm: bool = True, max_batch: int = 256, dtype: str = "bf16",
          arch: dict[str, Any] | None = None, memory_utilization: float = 0.9,
          fidelity: str = "fast"):
    """The cheapest mix of the ``menu``'s device types (designs or systems with prices, US$/h)
    that serves zoo ``model``'s traffic within the SLOs, and the routing of request sizes to
    types, solved as Mélange does (:mod:`simulators.fleet`), then confirmed by simulating the
    fleet on the trace. Traffic: ``trace`` a length distribution (``arena``, ``pubmed``,
    ``mixed``, ``sharegpt``, ``alpaca``) at ``rate`` requests/s (``requests`` of them
    simulated, default 2,000), or a CSV file. ``counts`` and ``routing`` (``{bucket label or
    "*": {device: weight}}``, weights summing to 1) give a fleet to simulate instead of
    solving for one. Returns a :class:`~simulators.fleet.FleetResult`.

    >>> f = api.fleet("llama2-7b", [{"name": "a10g", "accelerator": "gpu:a10g",
    ...                              "price_usd_per_h": 1.01},
    ...                             {"name": "a100", "accelerator": "gpu:a100",
    ...                              "price_usd_per_h": 3.67}],
    ...               trace="arena", rate=4, slo_tpot_s=0.12)
    >>> f.counts, f.cost_usd_per_h, f.routing, f.saving
    """
    import numpy as np

    from dse import api
    from simulators import fleet as fl
    from simulators.replicas import Outcome
    from simulators.schedulers import make_scheduler
    from workloads.requests import DISTRIBUTIONS
    from workloads.traces import synthetic_trace, trace_from
    if slo_ttft_s is None and slo_tpot_s is None:
        raise BadInput("slo_tpot_s", None, "expected a TPOT or a TTFT objective (s) for the "
                       "fleet to meet")
    for key, v in (("slo_ttft_s", slo_ttft_s), ("slo_tpot_s", slo_tpot_s)):
        if v is not None:
            _positive(key, v)
    attainment = fl.ATTAINMENT if attainment is None else attainment
    if isinstance(attainment, bool) or not isinstance(attainment, (int, float)) \
            or not 0 < attainment <= 1:
        raise BadInput("attainment", attainment, "expected a share in (0, 1]")
    if (counts is None) != (routing is None):
        raise BadInput("routing" if routing is None else "counts", None,
                       "expected counts and routing together (a fleet to simulate), or "
                       "neither (solve for the cheapest)")
    if isinstance(trace, str) and trace in DISTRIBUTIONS:
        if rate is None:
            raise BadInput("rate", rate, "expected a number > 0 (requests/s) with a length "
                           "distribution")
        sample = synthetic_trace(trace, rate, 20_000, seed=seed)
        tr = trace_from(trace, rate, requests if requests or duration_s else 2000, duration_s,
                        arrival, burstiness, seed)
    else:
        tr = trace_from(trace, rate, requests, duration_s, arrival, burstiness, seed)
        sample = tr
    total_rate = float(rate) if rate is not None else float(tr.rate)
    buckets, _ = fl.bucketize(sample.input_len, sample.output_len,
                              tuple(input_edges or fl.INPUT_EDGES),
                              tuple(output_edges or fl.OUTPUT_EDGES))
    base = api._iteration_base(model, dtype, arch)
    longest = int(max((sample.input_len + sample.output_len).max(),
                      (tr.input_len + tr.output_len).max()))
    devices = menu_devices(menu, base, max(2048, max_batch, longest), memory_utilization,
                           fidelity)
    names = [d.name for d in devices]
    sched = (lambda: make_scheduler("continuous", max_batch))
    model_name = base.model
    if counts is not None:
        if not isinstance(counts, dict) or not counts:
            raise BadInput("counts", counts, "expected {device: instances}")
        for k, v in counts.items():
            if k not in names:
                raise BadInput(f"counts.{k}", v, "expected a device of the menu: "
                               + ", ".join(names))
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 100_000:
                raise BadInput(f"counts.{k}", v, "expected an int in [0, 100000]")
        if not any(counts.values()):
            raise BadInput("counts", counts, "expected at least one instance (a fleet of "
                           "zero devices serves nothing)")
        for k, v in counts.items():
            d = devices[names.index(k)]
            if v and d.cost is None:
                raise BadInput(f"counts.{k}", v, f"expected a device that holds {model_name}: "
                               f"{d.unusable}")
        weights = fl.check_routing(routing, buckets, names)
        cost = fl.fleet_cost_usd_per_h({k: v for k, v in counts.items() if v}, devices)
        result = fl.FleetResult(
            model=model_name, rate=total_rate,
            slo={"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s, "attainment": attainment},
            buckets=buckets, menu=[{"name": d.name, "price_usd_per_h": d.price_usd_per_h,
                                    "unusable": d.unusable, "target": d.describe}
                                   for d in devices],
            counts={k: v for k, v in counts.items() if v}, cost_usd_per_h=cost,
            routing={b.label: {names[g]: float(weights[i, g]) for g in range(len(names))
                               if weights[i, g] > 0} for i, b in enumerate(buckets)},
            max_rate={}, load={}, single={}, best_single=None, saving=None,
            solver={"solver": "given"})
    else:
        result = fl.plan_fleet(devices, buckets, total_rate, slo_tpot_s, slo_ttft_s,
                               attainment, fl.SLICE_FACTOR if slice_factor is None
                               else slice_factor, max_batch, model_name)
        weights = np.array([[result.routing[b.label].get(n, 0.0) for n in names]
                            for b in buckets])
    if confirm:
        tr_buckets, which = fl.bucketize(tr.input_len, tr.output_len,
                                         tuple(input_edges or fl.INPUT_EDGES),
                                         tuple(output_edges or fl.OUTPUT_EDGES))
        labels = [b.label for b in buckets]
        # a bucket of the simulated trace absent from the sample is routed as the nearest
        # sampled bucket (by mean lengths)
        index = []
        for b in tr_buckets:
            if b.label in labels:
                index.append(labels.index(b.label))
            else:
                d = [abs(math.log(b.input_len / s.input_len)) + abs(math.log(
                    b.output_len / s.output_len)) for s in buckets]
                index.append(int(np.argmin(d)))
        out: Outcome = fl.simulate_fleet(devices, result.counts, weights, tr,
                                         np.asarray(index)[which], slo_ttft_s, slo_tpot_s,
                                         sched, memory_utilization)
        result.confirm = out.summary(slo_ttft_s, slo_tpot_s)
        result.confirm["meets_attainment"] = result.confirm["slo_attainment"] >= attainment
        flat = [n for n in names for _ in range(result.counts.get(n, 0))]
        served = [flat[i] for i in out.instance if i >= 0]
        result.confirm["requests_per_type"] = {n: served.count(n) for n in result.counts}
    return result


#: Keys of a ``draft`` mapping: the draft model, and where it runs (default: the target's
#: device or system).
DRAFT_KEYS = ("model", "hf_config", "arch", "workload") + TARGET_KEYS


def speculate(model, draft: Any = None, heads: bool = False, k: int = 4,
              acceptance: float | None = None, accepted_tokens: float | None = None,
              input_len: int = 128, output_len: int = 128, batch: int = 1,
              accelerator=None, hw: dict[str, Any] | None = None, system=None,
              devices: int | None = None, parallel=None, sys: dict[str, Any] | None = None,
              overlap: bool = False, seed: int = 0, dtype: str = "bf16",
              arch: dict[str, Any] | None = None, fidelity: str = "fast"):
    """Speculative decoding of zoo ``model`` on a design or system (as :func:`dse.api.generate`
    takes it; :mod:`simulators.speculative`): ``draft`` a zoo model name, a captured decode
    :class:`~workloads.ir.Workload` (your own module through ``api.workload(module=...,
    phase="decode")``) or a mapping (``model`` | ``hf_config`` | ``workload``, ``arch``, and
    where it runs: ``accelerator``, ``hw``, ``system``, ... ; default the target's device), or
    ``heads=True`` for ``k`` self-drafting heads on the target; ``k`` drafted tokens per
    round; ``acceptance`` the per-token acceptance probability in [0, 1] or
    ``accepted_tokens`` the mean tokens a round keeps; ``overlap`` drafts on the draft's own
    device while the target verifies. Returns a
    :class:`~simulators.speculative.SpeculativeResult` (TPOT and speed-up against plain
    decoding on the same target).

    >>> s = api.speculate("llama2-7b", draft="tinyllama-1.1b", k=4, acceptance=0.8,
    ...                   accelerator="gpu:h100")
    >>> s.speedup, s.tpot_s, s.tokens_per_round
    """
    from dse import api
    from simulators.speculative import Drafter, acceptance_for, speculative_generate
    from workloads.ir import Workload
    if (draft is None) == (not heads):
        raise BadInput("draft", draft, "expected a draft model or heads=True (one of them)")
    if (acceptance is None) == (accepted_tokens is None):
        raise BadInput("acceptance", acceptance, "expected acceptance (per token, in [0, 1]) "
                       "or accepted_tokens (mean tokens per round), one of them")
    if accepted_tokens is not None:
        if isinstance(accepted_tokens, bool) or not isinstance(accepted_tokens, (int, float)):
            raise BadInput("accepted_tokens", accepted_tokens, "expected a number of tokens")
        if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
            acceptance = acceptance_for(float(accepted_tokens), k)
    for key, v in (("input_len", input_len), ("output_len", output_len), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20:
            raise BadInput(key, v, "expected an int in [1, 1048576]")
    base = api._iteration_base(model, dtype, arch)
    spec = {"accelerator": accelerator, "hw": hw, "system": system, "devices": devices,
            "parallel": parallel, "sys": sys}
    need = max(batch * input_len, batch * (int(k) + 1) if isinstance(k, int) else 1, 64)
    target = cost_model_of("target", spec, base, need, fidelity)
    if heads:
        drafter = Drafter(None, target, {"heads": k, "on": "target"})
    else:
        if isinstance(draft, (str, Workload)):
            draft = {"model": draft} if isinstance(draft, str) else {"workload": draft}
        check_mapping("draft", draft, DRAFT_KEYS)
        if sum(draft.get(x) is not None for x in ("model", "hf_config", "workload")) != 1:
            raise BadInput("draft", draft, "expected one of model, hf_config, workload")
        if draft.get("workload") is not None:
            dbase = draft["workload"]
            if not isinstance(dbase, Workload):
                raise BadInput("draft.workload", dbase, "expected a captured decode Workload")
        elif draft.get("hf_config") is not None:
            dbase = api.workload(hf_config=draft["hf_config"], phase="decode", batch=1,
                                 context=1, dtype=dtype, arch=draft.get("arch"))
        else:
            dbase = api._iteration_base(draft["model"], dtype, draft.get("arch"))
        if dbase.params and base.params and dbase.params >= base.params:
            raise BadInput("draft", f"{dbase.model} ({dbase.params / 1e9:.3g} B parameters)",
                           f"expected a draft smaller than the target {base.model} "
                           f"({base.params / 1e9:.3g} B parameters)")
        placed = {key: draft.get(key) for key in TARGET_KEYS}
        own = any(v is not None for v in placed.values())
        dcost = cost_model_of("draft", placed if own else spec, dbase, need, fidelity)
        if overlap and not own:
            raise BadInput("overlap", overlap, "expected the draft on its own device (give "
                           "draft.accelerator or draft.system) to overlap it with the target")
        drafter = Drafter(dcost, None, {"model": dbase.model, "params": dbase.params,
                                        "device": "own" if own else "target",
                                        "target": dcost.target.describe()})
    return speculative_generate(target, drafter, input_len, output_len, batch, k,
                                acceptance, overlap, seed)
