"""Requests served by several independent instances, and the SLO metrics of the outcome.

Fleets (:mod:`simulators.fleet`) and colocated baselines (:mod:`simulators.disaggregated`)
serve one trace on many instances that do not interact: a router assigns each request to one
instance, each instance serves its share with :func:`simulators.serving.simulate_serving`, and
the per-request times are gathered back. :class:`Outcome` holds them (arrival, lengths, first
token, finish, instance) and computes what the serving literature reports: TTFT / TPOT / E2E
percentiles, SLO attainment (the share of *all* requests, rejected ones included, meeting both
SLOs) and goodput (requests meeting both SLOs per second of the run, DistServe's definition
[P Zhong et al., DistServe, OSDI 2024, Sec. 2]).

Routing: :func:`route_least_work` gives each request, in arrival order, to the instance with
the least work assigned so far (prompt + output tokens; ties to the lowest index): a
deterministic balance of the token load, not of the instantaneous queues [E: a stand-in for
vLLM-style routers that read queue lengths].
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from dse.errors import BadInput
from simulators.economics import Economics, run_usd
from simulators.serving import _percentiles as percentiles
from workloads.traces import Trace


@dataclass
class Outcome:
    """Per-request times of a run over one trace (s; NaN: never happened) and what the run
    cost: ``energy_j`` (dynamic and static, every instance over the span), ``usd`` (the
    instances' capital cost over the span plus energy), ``instance`` (which instance served
    each request, -1: rejected)."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray
    first_token_s: np.ndarray
    finish_s: np.ndarray
    generated: np.ndarray
    instance: np.ndarray
    energy_j: float = 0.0
    usd: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def requests(self) -> int:
        return len(self.arrival_s)

    @property
    def done(self) -> np.ndarray:
        return ~np.isnan(self.finish_s)

    @property
    def span_s(self) -> float:
        """First arrival to last completion, s."""
        d = self.done
        return float(np.nanmax(self.finish_s) - self.arrival_s[0]) if d.any() else 0.0

    def ttft_s(self) -> np.ndarray:
        """Per request (NaN when it never produced a token), s."""
        return self.first_token_s - self.arrival_s

    def tpot_s(self) -> np.ndarray:
        """Per request, first to last token over ``output - 1`` tokens (0 for one-token
        outputs, NaN when unfinished), s."""
        with np.errstate(invalid="ignore", divide="ignore"):
            t = np.where(self.output_len > 1, (self.finish_s - self.first_token_s)
                         / np.maximum(self.output_len - 1, 1), 0.0)
        t[np.isnan(self.finish_s)] = np.nan
        return t

    def met(self, slo_ttft_s: float | None, slo_tpot_s: float | None) -> np.ndarray:
        """Which requests finished within both SLOs (None: no objective)."""
        ok = self.done.copy()
        if slo_ttft_s is not None:
            ok &= np.nan_to_num(self.ttft_s(), nan=np.inf) <= slo_ttft_s
        if slo_tpot_s is not None:
            ok &= np.nan_to_num(self.tpot_s(), nan=np.inf) <= slo_tpot_s
        return ok

    def attainment(self, slo_ttft_s: float | None, slo_tpot_s: float | None) -> float:
        """Share of all requests (rejected included) meeting both SLOs."""
        return float(self.met(slo_ttft_s, slo_tpot_s).mean()) if self.requests else 0.0

    def summary(self, slo_ttft_s: float | None = None, slo_tpot_s: float | None = None
                ) -> dict[str, Any]:
        """Latency percentiles (s), throughput (output tokens/s, requests/s over the span),
        goodput (requests/s meeting both SLOs), SLO attainment, energy per output token (J),
        US$ per million output tokens, completed and rejected requests."""
        d = self.done
        span = self.span_s
        tokens = int(self.generated[d].sum())
        tpot = self.tpot_s()[d & (self.output_len > 1)]
        good = int(self.met(slo_ttft_s, slo_tpot_s).sum())
        return {"requests": self.requests, "completed": int(d.sum()),
                "rejected": int(self.requests - d.sum()), "span_s": span,
                "ttft_s": percentiles(self.ttft_s()[d]), "tpot_s": percentiles(tpot),
                "e2e_s": percentiles((self.finish_s - self.arrival_s)[d]),
                "throughput_tok_s": tokens / span if span > 0 else 0.0,
                "throughput_req_s": int(d.sum()) / span if span > 0 else 0.0,
                "goodput_req_s": good / span if span > 0 else 0.0,
                "slo_attainment": good / self.requests if self.requests else 0.0,
                "slo": {"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s},
                "output_tokens": tokens,
                "energy_per_token_j": self.energy_j / tokens if tokens else float("nan"),
                "cost_per_mtok_usd": self.usd / tokens * 1e6 if tokens else float("nan"),
                **self.extra}


def route_least_work(input_len: np.ndarray, output_len: np.ndarray, instances: int
                     ) -> np.ndarray:
    """The instance of each request (arrival order): the one with the least prompt + output
    tokens assigned so far, ties to the lowest index."""
    if isinstance(instances, bool) or not isinstance(instances, (int, np.integer)) \
            or instances < 1:
        raise BadInput("instances", instances, "expected an int >= 1")
    load = np.zeros(int(instances))
    out = np.empty(len(input_len), dtype=np.int64)
    work = (np.asarray(input_len) + np.asarray(output_len)).astype(float)
    for i, w in enumerate(work):
        k = int(np.argmin(load))
        out[i] = k
        load[k] += w
    return out


def sub_trace(trace: Trace, mask: np.ndarray, name: str) -> Trace:
    """The requests of ``trace`` where ``mask`` holds, their times kept."""
    return Trace(name, trace.arrival_s[mask], trace.input_len[mask], trace.output_len[mask])


def serve_instances(trace: Trace, assignment: np.ndarray, serve: Callable[[int, Trace], Any],
                    instances: int, static_w: Callable[[int], float],
                    capital_usd: Callable[[int], float],
                    devices: Callable[[int], int] = lambda _k: 1) -> Outcome:
    """Serve the requests of ``trace`` that ``assignment`` gives each of ``instances``
    instances with ``serve(k, sub_trace) -> ServingResult`` and gather them: per-request
    times back in trace order, energy (each result's dynamic energy plus every instance's
    static power ``static_w(k)`` over the whole span: an instance with no request still idles)
    and cost (:func:`simulators.economics.run_usd` at the default economics: ``capital_usd(k)``
    and the hosts of ``devices(k)`` accelerators amortised over the span, plus their energy)."""
    n = len(trace)
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    generated = np.zeros(n, dtype=np.int64)
    inst = np.full(n, -1, dtype=np.int64)
    dyn = 0.0
    preempt = 0
    for k in range(instances):
        mask = assignment == k
        if not mask.any():
            continue
        r = serve(k, sub_trace(trace, mask, f"{trace.name}#{k}"))
        p = r.per_request
        idx = np.flatnonzero(mask)
        first[idx] = np.asarray(p["first_token_s"], dtype=float)
        finish[idx] = np.asarray(p["finish_s"], dtype=float)
        generated[idx] = np.asarray(p["generated"], dtype=np.int64)
        inst[idx[~np.isnan(finish[idx])]] = k
        dyn += r.energy_j - static_w(k) * r.span_s      # its dynamic part
        preempt += r.preemptions
    out = Outcome(trace.arrival_s, trace.input_len, trace.output_len, first, finish, generated,
                  inst)
    span = out.span_s
    static = sum(static_w(k) for k in range(instances))
    out.energy_j = dyn + static * span
    out.usd = run_usd(Economics(), sum(capital_usd(k) for k in range(instances)), out.energy_j,
                      span, sum(devices(k) for k in range(instances)))
    out.extra = {"preemptions": preempt}
    return out


def serve_replicas(cost, trace: Trace, count: int, scheduler: Callable[[], Any],
                   memory_utilization: float = 0.9) -> Outcome:
    """``trace`` served by ``count`` identical colocated instances (each prefills and decodes,
    :func:`simulators.serving.simulate_serving` with a fresh ``scheduler()``) behind
    :func:`route_least_work`."""
    from simulators.serving import simulate_serving
    assignment = route_least_work(trace.input_len, trace.output_len, count)
    return serve_instances(
        trace, assignment,
        lambda _k, tr: simulate_serving(cost, tr, scheduler(),
                                        memory_utilization=memory_utilization),
        count, lambda _k: cost.static_w, lambda _k: cost.target.cost_usd(),
        lambda _k: cost.target.devices)
