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
