"""Request-level simulation of an LLM server: arrivals, a scheduler, a paged KV cache, and the
cost of every iteration from :class:`simulators.iteration_cost.IterationCostModel`.

The loop is a plain discrete-event loop over iterations (deterministic; the trace carries the
randomness): at each iteration boundary the requests that have arrived join the queue, the
scheduler (:mod:`simulators.schedulers`) picks the iteration's prefill chunks and decodes, the
cost model gives its latency and energy, time advances, and every request whose prompt
completed or that decoded emits one token. With nothing to run, time jumps to the next
arrival. A request whose prompt and output cannot fit the KV cache even alone is rejected
(counted).

Metrics (:class:`ServingResult`): TTFT (arrival to first token), TPOT (first to last token over
``output - 1`` tokens, as vLLM's benchmark_serving), end-to-end latency, each at p50 / p90 /
p99 and mean; throughput (output tokens/s, requests/s over the span from the first arrival to
the last completion); goodput (requests/s that met both SLOs, DistServe's definition);
energy (iterations' dynamic energy + static power over the whole span, idle included) and
cost per million output tokens (:mod:`simulators.economics`: hardware and host amortised,
power at a PUE and a price per kWh, at the utilisation the run measured unless given); KV
occupancy, requests
running and waiting over time; preemptions; the time-averaged number of requests in the
system (Little's law: it equals the completion rate times the mean time in system).
"""

from __future__ import annotations

import time as _time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from dse.errors import BadInput
from simulators.iteration_cost import MEMORY_UTILIZATION, IterationCostModel
from simulators.schedulers import Batch, KVCache, Scheduler, State
from workloads.traces import Trace

#: KV-cache block, tokens [D vLLM default block_size = 16].
BLOCK_SIZE = 16
#: Points kept of the KV-occupancy timeline.
TIMELINE_POINTS = 400


def _percentiles(x: np.ndarray) -> dict[str, float]:
    if not len(x):
        return {"p50": float("nan"), "p90": float("nan"), "p99": float("nan"),
                "mean": float("nan")}
    p50, p90, p99 = np.percentile(x, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "mean": float(x.mean())}


def request_latencies(arrival_s: np.ndarray, first_token_s: np.ndarray,
                      finish_s: np.ndarray, output_len: np.ndarray) -> dict[str, np.ndarray]:
    """Per completed request: ``ttft`` (arrival to first token), ``tpot`` (first to last
    token over ``output - 1`` tokens; requests of one output token have none) and ``e2e``
    (arrival to last token), s. Unfinished (rejected) requests, with NaN times, are left out."""
    done = ~np.isnan(finish_s)
    multi = done & (output_len > 1)
    return {"ttft": (first_token_s - arrival_s)[done],
            "tpot": (finish_s - first_token_s)[multi] / (output_len[multi] - 1),
            "e2e": (finish_s - arrival_s)[done]}


@dataclass
class ServingResult:
    """What a serving run measured (see the module docstring); times in s, energy in J.
    ``span_s``: first arrival to last completion; ``arrival_rate``: the trace's mean arrival
    rate, requests/s; ``mean_in_system``: requests waiting or running, averaged over
    ``span_s``; ``max_running``: most requests running at once; ``kv_cache``: capacity
    (tokens, blocks), occupancy over time (a fraction of the blocks) and its peak;
    ``queue``: at the same instants as the KV occupancy, the requests running (admitted,
    holding KV blocks: the batch of the next decode) and those waiting to be admitted;
    ``per_request``: arrival, lengths, first-token and finish times, tokens generated,
    preemptions of every request."""

    model: str
    trace: str
    scheduler: dict[str, Any]
    requests: int
    completed: int
    rejected: int
    span_s: float
    ttft_s: dict[str, float]
    tpot_s: dict[str, float]
    e2e_s: dict[str, float]
    throughput_tok_s: float
    throughput_req_s: float
    goodput_req_s: float | None
    slo: dict[str, float | None]
    output_tokens: int
    energy_j: float
    energy_per_token_j: float
    cost_usd: float
    cost_per_mtok_usd: float
    lifetime_years: float
    usd_per_kwh: float
    kv_cache: dict[str, Any]
    preemptions: int
    iterations: int
    max_running: int
    mean_in_system: float
    arrival_rate: float
    sim_wall_s: float
    target: dict[str, Any] = field(default_factory=dict)
    #: Time the accelerator ran iterations, s (its busy share of ``span_s`` is the measured
    #: utilisation).
    busy_s: float = 0.0
    #: How ``cost_per_mtok_usd`` was made (:func:`simulators.economics.token_cost`).
    economics: dict[str, Any] = field(default_factory=dict)
    per_request: dict[str, list] = field(default_factory=dict)
    iteration_log: dict[str, list] = field(default_factory=dict)
    queue: dict[str, list] = field(default_factory=dict)

    @property
    def avg_power_w(self) -> float:
        """Mean power over the run (first arrival to last completion, idle included), W."""
        return self.energy_j / self.span_s if self.span_s > 0 else 0.0

    @property
    def edp(self) -> float:
        """Energy-delay product of a request's token: energy per output token times the mean
        end-to-end latency, J s."""
        return self.energy_per_token_j * self.e2e_s["mean"]

    def metrics(self) -> dict[str, float]:
        """Scalar metrics a study can optimise or constrain."""
        return {"ttft_p99_s": self.ttft_s["p99"], "tpot_p99_s": self.tpot_s["p99"],
                "e2e_p99_s": self.e2e_s["p99"], "ttft_p50_s": self.ttft_s["p50"],
                "tpot_p50_s": self.tpot_s["p50"], "throughput_tok_s": self.throughput_tok_s,
                "goodput_req_s": (self.goodput_req_s if self.goodput_req_s is not None
                                  else self.throughput_req_s),
                "cost_per_mtok_usd": self.cost_per_mtok_usd,
                "energy_per_token_j": self.energy_per_token_j,
                "preemptions": float(self.preemptions),
                "rejected": float(self.rejected)}

    def latencies(self) -> dict[str, np.ndarray]:
        """TTFT, TPOT and end-to-end latency of every completed request, s
        (:func:`request_latencies`)."""
        p = self.per_request
        return request_latencies(*(np.asarray(p[k], dtype=float) for k in (
            "arrival_s", "first_token_s", "finish_s", "output_len")))

    def to_dict(self, per_request: bool = False) -> dict[str, Any]:
        d = asdict(self)
        d.pop("iteration_log")
        if not per_request:
            d.pop("per_request")
        return d

    def to_chrome_trace(self) -> dict[str, Any]:
        """Iterations as spans on one track (args: prefill tokens, decodes), KV occupancy and
        the requests running and waiting as counters; times in us."""
        log = self.iteration_log
        events: list[dict[str, Any]] = [
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "iterations"}}]
        for t, dur, p, d in zip(log.get("start_s", []), log.get("latency_s", []),
                                log.get("prefill_tokens", []), log.get("decodes", [])):
            events.append({"name": "prefill" if p and not d else "decode" if not p else "mixed",
                           "ph": "X", "pid": 0, "tid": 0, "ts": t * 1e6, "dur": dur * 1e6,
                           "args": {"prefill_tokens": p, "decodes": d}})
        for t, occ in zip(self.kv_cache["timeline_s"], self.kv_cache["occupancy"]):
            events.append({"name": "kv_occupancy", "ph": "C", "pid": 0, "ts": t * 1e6,
                           "args": {"occupancy": occ}})
        q = self.queue
        for t, b, w in zip(q.get("timeline_s", []), q.get("running", []), q.get("waiting", [])):
            events.append({"name": "requests", "ph": "C", "pid": 0, "ts": t * 1e6,
                           "args": {"running": b, "waiting": w}})
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"model": self.model, "trace": self.trace}}


@dataclass
class RateSweep:
    """The same trace served at several arrival rates (``api.serve_sweep``): ``rates`` as
    asked, requests/s, ascending, and one :class:`ServingResult` each."""

    rates: list[float]
    results: list[ServingResult]

    def rows(self) -> list[dict[str, Any]]:
        """Per rate: throughput (output tokens/s, requests/s), goodput (requests/s), TTFT and
        TPOT p50 / p99 and end-to-end p99 (s), preemptions, rejected requests."""
        return [{"rate_req_s": rate, "throughput_tok_s": r.throughput_tok_s,
                 "throughput_req_s": r.throughput_req_s, "goodput_req_s": r.goodput_req_s,
                 "ttft_p50_s": r.ttft_s["p50"], "ttft_p99_s": r.ttft_s["p99"],
                 "tpot_p50_s": r.tpot_s["p50"], "tpot_p99_s": r.tpot_s["p99"],
                 "e2e_p99_s": r.e2e_s["p99"], "preemptions": r.preemptions,
                 "rejected": r.rejected} for rate, r in zip(self.rates, self.results)]

    def to_dict(self) -> dict[str, Any]:
        return {"rates": list(self.rates), "rows": self.rows()}


def simulate_serving(cost: IterationCostModel, trace: Trace, scheduler: Scheduler,
                     block_size: int = BLOCK_SIZE,
                     memory_utilization: float = MEMORY_UTILIZATION,
                     slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                     economics: "Economics | dict | None" = None,
                     log_iterations: bool = False) -> ServingResult:
    """Serve ``trace`` with ``scheduler`` on the design ``cost`` models (see the module
    docstring); ``economics``: the cost-per-token parameters
    (:class:`simulators.economics.Economics` or a dict of them; defaults as documented
    there)."""
    from simulators.economics import Economics, token_cost
    econ = Economics.of(economics)
    for key, v, lo, hi in (("block_size", block_size, 1, 4096),):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise BadInput(key, v, f"expected an int in [{lo}, {hi}]")
    for key, v in (("slo_ttft_s", slo_ttft_s), ("slo_tpot_s", slo_tpot_s)):
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                  and 0 < v < 1e9):
            raise BadInput(key, v, "expected a time > 0, s")
    if not (isinstance(memory_utilization, (int, float)) and 0 < memory_utilization <= 1):
        raise BadInput("memory_utilization", memory_utilization, "expected a number in (0, 1]")
    longest = int((trace.input_len + trace.output_len).max())
    need = max(scheduler.token_budget, scheduler.max_batch, longest)
    if need > cost.max_tokens:
        raise BadInput("token_budget", need, f"expected at most the cost model's "
                       f"{cost.max_tokens} tokens per iteration")
    started = _time.perf_counter()
    kv_tokens = cost.kv_capacity_tokens(memory_utilization)
    kv = KVCache(kv_tokens // block_size, block_size)
    fits = kv.blocks - kv.watermark
    n = len(trace)
    arrival = trace.arrival_s
    s = State(trace.input_len, trace.output_len, kv)
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    now, nxt = 0.0, 0
    energy_dyn = 0.0
    occ_t, occ_v, occ_b, occ_w = [], [], [], []
    log: dict[str, list] = {"start_s": [], "latency_s": [], "prefill_tokens": [], "decodes": [],
                            "chunks": [], "cached_kv_tokens": []}
    in_system_area, iterations, max_running, busy = 0.0, 0, 0, 0.0
    finished, n_rejected = 0, 0

    def sample() -> None:
        occ_t.append(now)
        occ_v.append(1.0 - kv.free / max(kv.blocks, 1))
        occ_b.append(s.running)
        # waiting: the queue, and those that arrived during the iteration (they join it at
        # the next boundary)
        occ_w.append(len(s.waiting) + int(np.searchsorted(arrival, now, "right")) - nxt)

    while finished + n_rejected < n:
        while nxt < n and arrival[nxt] <= now:
            if kv.blocks_for(trace.input_len[nxt] + trace.output_len[nxt]) > fits:
                n_rejected += 1                       # longer than the whole cache holds
            else:
                s.waiting.append(nxt)
            nxt += 1
        batch = scheduler.step(s)
        if batch is None:
            if s.running == 0 and s.waiting:           # the head can never fit: reject it
                s.waiting.popleft()
                n_rejected += 1
                continue
            if nxt < n:
                now = max(now, float(arrival[nxt]))
                continue
            break
        decodes = batch.decodes
        d = len(decodes) + batch.padding
        kv_sum = int(s.kv_tokens[decodes].sum()) + len(decodes) + batch.padding_kv + batch.padding
        chunks = [(c0, c1) for _, c0, c1 in batch.chunks]
        latency, e = cost.cost(d, kv_sum, chunks)
        in_system_area += (len(s.waiting) + s.running) * latency
        max_running = max(max_running, s.running)
        if log_iterations:
            log["start_s"].append(now)
            log["latency_s"].append(latency)
            log["prefill_tokens"].append(sum(c for _, c in chunks))
            log["decodes"].append(d)
            log["chunks"].append(len(chunks))
            log["cached_kv_tokens"].append(kv_sum - d + sum(c for c, _ in chunks))
        now += latency
        busy += latency
        energy_dyn += e
        iterations += 1
        finished += _advance(s, batch, now, first, finish)
        if iterations % max(1, n // 50) == 0 or not occ_t:
            sample()
    if iterations and occ_t[-1] != now:
        sample()                                        # the end: every request has left
    done = ~np.isnan(finish)
    t0 = float(arrival[0]) if n else 0.0
    span = float(np.nanmax(finish) - t0) if done.any() else 0.0
    lat = request_latencies(arrival, first, finish, trace.output_len)
    tokens = int(s.generated[done].sum())
    energy = energy_dyn + cost.static_w * span
    good = None
    if slo_ttft_s is not None or slo_tpot_s is not None:
        ok = done.copy()
        if slo_ttft_s is not None:
            ok &= (first - arrival) <= slo_ttft_s
        if slo_tpot_s is not None:
            with np.errstate(invalid="ignore", divide="ignore"):
                per = np.where(trace.output_len > 1, (finish - first) /
                               np.maximum(trace.output_len - 1, 1), 0.0)
            ok &= per <= slo_tpot_s
        good = int(ok.sum()) / span if span > 0 else 0.0
    cost_usd = cost.target.cost_usd()
    money = token_cost(econ, tokens, span, busy, energy_dyn, cost.static_w, cost_usd,
                       cost.target.devices)
    idx = np.linspace(0, len(occ_t) - 1, min(len(occ_t), TIMELINE_POINTS)).astype(int) \
        if occ_t else np.zeros(0, dtype=int)
    timeline = [occ_t[i] for i in idx]
    return ServingResult(
        model=cost.base.model, trace=trace.name, scheduler=scheduler.describe(), requests=n,
        completed=int(done.sum()), rejected=n_rejected, span_s=span,
        ttft_s=_percentiles(lat["ttft"]), tpot_s=_percentiles(lat["tpot"]),
        e2e_s=_percentiles(lat["e2e"]),
        throughput_tok_s=tokens / span if span > 0 else 0.0,
        throughput_req_s=int(done.sum()) / span if span > 0 else 0.0, goodput_req_s=good,
        slo={"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s}, output_tokens=tokens,
        energy_j=energy, energy_per_token_j=energy / tokens if tokens else float("nan"),
        cost_usd=cost_usd, cost_per_mtok_usd=money["cost_per_mtok_usd"],
        lifetime_years=econ.amortisation_years, usd_per_kwh=econ.usd_per_kwh,
        kv_cache={"capacity_tokens": kv_tokens, "block_size": block_size,
                  "blocks": kv.blocks, "memory_utilization": memory_utilization,
                  "bytes_per_token": cost.kv_bytes_per_token,
                  "timeline_s": timeline, "occupancy": [occ_v[i] for i in idx],
                  "peak_occupancy": max(occ_v, default=0.0)},
        preemptions=int(s.preemptions.sum()), iterations=iterations, max_running=max_running,
        mean_in_system=in_system_area / span if span > 0 else 0.0,
        arrival_rate=trace.rate if n > 1 else 0.0,
        sim_wall_s=_time.perf_counter() - started, target=cost.target.describe(),
        busy_s=busy, economics=money,
        per_request={"arrival_s": arrival.tolist(), "input_len": trace.input_len.tolist(),
                     "output_len": trace.output_len.tolist(), "first_token_s": first.tolist(),
                     "finish_s": finish.tolist(), "generated": s.generated.tolist(),
                     "preemptions": s.preemptions.tolist()},
        iteration_log=log if log_iterations else {},
        queue={"timeline_s": list(timeline), "running": [occ_b[i] for i in idx],
               "waiting": [occ_w[i] for i in idx]})


def _advance(s: State, batch: Batch, now: float, first: np.ndarray,
             finish: np.ndarray) -> int:
    """Apply an iteration that ended at ``now``: chunks' KV, prompts completed emit their
    token (first token or, after a preemption, the next), decodes emit theirs; finished
    requests free their blocks. Returns how many finished."""
    done_now = []
    joined = []
    for r, _, c in batch.chunks:
        s.kv_tokens[r] += c
        s.prefill_left[r] -= c
        if s.prefill_left[r] == 0:
            s.prefilling.remove(r)
            if s.generated[r] == 0:
                first[r] = now
            s.generated[r] += 1
            if s.generated[r] >= s.output_len[r]:
                done_now.append(r)
            else:
                joined.append(r)
    d = batch.decodes
    if len(d):
        s.kv_tokens[d] += 1
        s.generated[d] += 1
        ended = d[s.generated[d] >= s.output_len[d]]
        done_now.extend(int(r) for r in ended)
    if done_now or joined:
        keep = s.decoding
        if done_now:
            keep = keep[~np.isin(keep, done_now)]
        if joined:
            keep = np.concatenate([keep, np.array(joined, dtype=np.int64)])
        s.decoding = keep
    for r in done_now:
        finish[r] = now
        s.kv.free += int(s.blocks[r])
        s.blocks[r] = 0
    return len(done_now)
