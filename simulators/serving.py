"""Request-level simulation of an LLM server: arrivals, a scheduler, a paged KV cache, and the
cost of every iteration from :class:`simulators.iteration_cost.IterationCostModel`.

The loop is a plain discrete-event loop over iterations (deterministic; the trace carries the
randomness): at each iteration boundary the requests that have arrived join the queue, the
scheduler (:mod:`simulators.schedulers`) picks the iteration's prefill chunks and decodes, the
cost model gives its latency and energy, time advances, and every request whose prompt
completed or that decoded emits one token. With nothing to run, time jumps to the next
arrival. A request whose prompt and output cannot fit the KV cache even alone is rejected
(counted).

Systems with ``dp > 1`` serve on ``dp`` replicas, each with its own scheduler and KV cache, the
arrivals shared by a router (:data:`ROUTERS`). With ``pp > 1`` a replica is a pipeline: a batch
crosses the stages in turn (each takes the iteration's time over ``pp``), and up to ``pp``
batches of disjoint requests are in flight, as vLLM's and Vidur's pipeline schedulers run them
[R Vidur ``BaseReplicaScheduler.on_schedule``: a batch per stage]. ``preemption="swap"``
copies a victim's KV over the device's host link (:meth:`IterationCostModel.swap_cost`,
added to the iteration that follows).

Metrics (:class:`ServingResult`): TTFT (arrival to first token), TPOT (first to last token over
``output - 1`` tokens, as vLLM's benchmark_serving), end-to-end latency, each at p50 / p90 /
p99 and mean. Throughput and goodput are given twice, named apart:

* over the **arrival window** (first to last arrival, ``window_s``): ``throughput_tok_s`` (output
  tokens emitted in the window), ``throughput_req_s`` (requests completed in it) and
  ``goodput_req_s`` (those of them that met both SLOs), each per second of the window: the
  rate the server sustains under the offered load, which a run's drain tail does not dilute;
* over the **whole run** (first arrival to last completion, ``span_s``):
  ``throughput_run_tok_s``, ``throughput_run_req_s``, ``goodput_run_req_s`` (what vLLM's
  benchmark_serving reports: every request over the benchmark's duration).

Goodput is DistServe's: requests meeting both the TTFT and the TPOT SLO, per second [P Zhong
et al., OSDI 2024]. Energy (iterations' dynamic energy + static power over the whole span,
idle included) and cost per million output tokens (:mod:`simulators.economics`: hardware and
host amortised, power at a PUE and a price per kWh, at the utilisation the run measured
unless given); KV occupancy, requests
running and waiting over time; preemptions and swaps; the time-averaged number of requests in
the system (integrated over the run; Little's law: it equals the completion rate times the mean
time in system).
"""

from __future__ import annotations

import copy
import heapq
import math
import time as _time
from collections import deque
from dataclasses import dataclass, field, fields
from typing import Any, Callable

import numpy as np

from dse.errors import BadInput
from simulators.decode_stretch import run_decodes
from simulators.iteration_cost import MEMORY_UTILIZATION, IterationCostModel
from simulators.schedulers import Batch, KVCache, Scheduler, State
from workloads.traces import Trace

#: KV-cache block, tokens [D vLLM default block_size = 16].
BLOCK_SIZE = 16
#: Points kept of the KV-occupancy timeline.
TIMELINE_POINTS = 400
#: Step a lone replica's decode stretches in one go (:mod:`simulators.decode_stretch`: the same
#: numbers; off only to check that).
DECODE_STRETCH = True


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
    ``span_s``: first arrival to last completion (the whole run); ``window_s``: first to last
    arrival (the arrival window; throughput and goodput without ``_run`` are over it);
    ``arrival_rate``: the trace's mean arrival rate, requests/s; ``mean_in_system``: requests
    waiting or running, averaged over ``span_s``; ``swaps``: preemptions by swapping,
    ``swapped_bytes`` copied over the host link (out and in, one device's); ``max_running``: most requests running at once; ``kv_cache``: capacity
    (tokens, blocks), occupancy over time (a fraction of the blocks) and its peak;
    ``queue``: at the same instants as the KV occupancy, the requests running (admitted,
    holding KV blocks: the batch of the next decode) and those waiting to be admitted;
    ``per_request``: arrival, lengths, first-token and finish times, tokens generated,
    preemptions, swaps and the replica of every request."""

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
    per_request: dict[str, list] = field(default_factory=dict)
    iteration_log: dict[str, list] = field(default_factory=dict)
    queue: dict[str, list] = field(default_factory=dict)
    window_s: float = 0.0
    throughput_run_tok_s: float = 0.0
    throughput_run_req_s: float = 0.0
    goodput_run_req_s: float | None = None
    swaps: int = 0
    swapped_bytes: float = 0.0
    #: Time each device ran iterations, s (averaged over the replicas; its share of
    #: ``span_s`` is the measured utilisation).
    busy_s: float = 0.0
    #: How ``cost_per_mtok_usd`` was made (:func:`simulators.economics.token_cost`).
    economics: dict[str, Any] = field(default_factory=dict)

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
                "throughput_run_tok_s": self.throughput_run_tok_s,
                "goodput_run_req_s": (self.goodput_run_req_s if self.goodput_run_req_s
                                      is not None else self.throughput_run_req_s),
                "cost_per_mtok_usd": self.cost_per_mtok_usd,
                "energy_per_token_j": self.energy_per_token_j,
                "preemptions": float(self.preemptions), "swaps": float(self.swaps),
                "rejected": float(self.rejected)}

    def latencies(self) -> dict[str, np.ndarray]:
        """TTFT, TPOT and end-to-end latency of every completed request, s
        (:func:`request_latencies`)."""
        p = self.per_request
        return request_latencies(*(np.asarray(p[k], dtype=float) for k in (
            "arrival_s", "first_token_s", "finish_s", "output_len")))

    def to_dict(self, per_request: bool = False) -> dict[str, Any]:
        skip = {"iteration_log"} | (set() if per_request else {"per_request"})
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)
                if f.name not in skip}

    def to_chrome_trace(self) -> dict[str, Any]:
        """Iterations as spans on one track (args: prefill tokens, decodes), KV occupancy and
        the requests running and waiting as counters; times in us."""
        log = self.iteration_log
        replicas = sorted(set(log.get("replica", []))) or [0]
        events: list[dict[str, Any]] = [
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": i,
             "args": {"name": "iterations" if len(replicas) == 1 else f"replica {i}"}}
            for i in replicas]
        for t, dur, p, d, i in zip(log.get("start_s", []), log.get("latency_s", []),
                                   log.get("prefill_tokens", []), log.get("decodes", []),
                                   log.get("replica", []) or [0] * len(log.get("start_s", []))):
            events.append({"name": "prefill" if p and not d else "decode" if not p else "mixed",
                           "ph": "X", "pid": 0, "tid": i, "ts": t * 1e6, "dur": dur * 1e6,
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
        """Per rate: throughput (output tokens/s, requests/s; over the arrival window and, with
        ``_run``, the whole run), goodput (requests/s), TTFT and TPOT p50 / p99 and end-to-end
        p99 (s), preemptions, rejected requests."""
        return [{"rate_req_s": rate, "throughput_tok_s": r.throughput_tok_s,
                 "throughput_req_s": r.throughput_req_s, "goodput_req_s": r.goodput_req_s,
                 "throughput_run_tok_s": r.throughput_run_tok_s,
                 "throughput_run_req_s": r.throughput_run_req_s,
                 "ttft_p50_s": r.ttft_s["p50"], "ttft_p99_s": r.ttft_s["p99"],
                 "tpot_p50_s": r.tpot_s["p50"], "tpot_p99_s": r.tpot_s["p99"],
                 "e2e_p99_s": r.e2e_s["p99"], "preemptions": r.preemptions,
                 "rejected": r.rejected} for rate, r in zip(self.rates, self.results)]

    def to_dict(self) -> dict[str, Any]:
        return {"rates": list(self.rates), "rows": self.rows()}


#: Host swap space per device for ``preemption="swap"``, bytes [D vLLM ``swap_space`` = 4
#: GiB per GPU by default].
SWAP_SPACE_BYTES = 4 * 2**30
#: How replicas (``dp > 1``) share the arrivals: ``round_robin`` (in turn) or
#: ``least_loaded`` (the fewest outstanding requests, queued or running; ties to the lowest
#: index) [R Vidur's ``round_robin`` and ``lor`` global schedulers].
ROUTERS = ("round_robin", "least_loaded")


def check_serving_options(preemption: str, router: str, swap_space_bytes: float) -> None:
    """One :class:`BadInput` line for a preemption mode, router or swap space not allowed."""
    from simulators.schedulers import PREEMPTION
    if preemption not in PREEMPTION:
        raise BadInput("preemption", preemption, "expected one of " + ", ".join(PREEMPTION))
    if router not in ROUTERS:
        raise BadInput("router", router, "expected one of " + ", ".join(ROUTERS))
    if isinstance(swap_space_bytes, bool) or not isinstance(swap_space_bytes, (int, float)) \
            or not 0 <= swap_space_bytes <= 2**50:
        raise BadInput("swap_space_bytes", swap_space_bytes, "expected bytes in [0, 2**50]")


class _Replica:
    """One replica behind the router: its scheduler, paged KV cache and request state, and its
    pipeline (``stages`` stages; up to ``stages`` batches in flight, each crossing every
    stage in turn). ``t``: when it next has something to do (a batch leaving the pipeline,
    a stage free for the next batch), inf while it waits for arrivals."""

    def __init__(self, index: int, cost: IterationCostModel, trace: Trace,
                 scheduler: Scheduler, kv: KVCache, preemption: str, swap_blocks: int,
                 kv_step: int = 1):
        self.index, self.cost, self.sched, self.kv = index, cost, scheduler, kv
        self.kv_step = kv_step
        self.s = State(trace.input_len, trace.output_len, kv, preemption, swap_blocks)
        self.pending: deque[int] = deque()
        self.stages = cost.stages
        self.stage_free = [0.0] * self.stages
        self.flying: list[tuple] = []
        self.t = math.inf
        self.energy_j = 0.0
        self.busy_s = 0.0
        self.iterations = 0
        self.swapped_tokens = 0

    def outstanding(self) -> int:
        s = self.s
        return len(self.pending) + len(s.waiting) + s.running + len(s.swapped)

    def wake(self, at: float) -> None:
        """A request was routed here at ``at``: look at it once a stage is free for it."""
        if len(self.flying) < self.stages:
            self.t = min(self.t, max(at, self.stage_free[0]))

    def boundary(self, now: float, first: np.ndarray, finish: np.ndarray, run: "_Run",
                 horizon: float | None = None, every: int = 1) -> float:
        """At ``now``: batches that left the pipeline emit their tokens, routed requests join
        the queue, and the scheduler fills the free stage. With ``horizon`` (the next
        arrival; one replica), decode iterations that end before it are stepped in one go
        first (:func:`simulators.decode_stretch.run_decodes`, the same numbers). Returns
        the time of the boundary the scheduler filled the stage at."""
        s = self.s
        while self.flying and self.flying[0][0] <= now:
            end, _, batch = heapq.heappop(self.flying)
            emitted = len(batch.decodes) + sum(1 for r, _, c in batch.chunks
                                               if s.prefill_left[r] == c)
            done = _advance(s, batch, end, first, finish, flown=self.stages > 1)
            run.landed(end, emitted, done)
        while self.pending:
            s.waiting.append(self.pending.popleft())
        if horizon is not None:
            now = run_decodes(self, now, horizon, run, every)
        more = False
        while len(self.flying) < self.stages and now >= self.stage_free[0]:
            batch = self.sched.step(s)
            if batch is None:
                if s.running == 0 and not s.swapped and s.waiting:
                    s.waiting.popleft()                # the head can never fit: reject it
                    run.rejected_late += 1
                    continue
                break
            self.dispatch(batch, now, run)
            more = bool(s.waiting or s.prefilling or len(s.decoding) or s.swapped)
            if self.stages == 1:
                break
        cands = [self.flying[0][0]] if self.flying else []
        if more and len(self.flying) < self.stages:
            cands.append(self.stage_free[0])
        self.t = min(cands) if cands else math.inf
        return now

    def dispatch(self, batch: Batch, now: float, run: "_Run") -> None:
        s, cost = self.s, self.cost
        batch.swap_out, batch.swap_in = s.take_swaps()
        decodes = batch.decodes
        d = len(decodes) + batch.padding
        kv_sum = int(s.kv_tokens[decodes].sum()) + len(decodes) + batch.padding_kv + batch.padding
        chunks = [(c0, c1) for _, c0, c1 in batch.chunks]
        lens = (np.concatenate([s.kv_tokens[decodes], batch.padding_lens]) + 1
                if cost.per_request and d else None)
        latency, e = cost.cost(d, kv_sum, chunks, self.kv_step, lens)
        swapped = batch.swap_out + batch.swap_in
        swap_s, swap_j = cost.swap_cost(swapped) if swapped else (0.0, 0.0)
        self.swapped_tokens += swapped
        stage_s = latency / self.stages + swap_s   # each stage copies its own layers' KV
        t = now
        for k in range(self.stages):
            t = max(t, self.stage_free[k]) + stage_s
            self.stage_free[k] = t
        if self.stages > 1:
            s.fly(batch)
        heapq.heappush(self.flying, (t, run.next_seq(), batch))
        self.energy_j += e + swap_j
        self.busy_s += stage_s
        self.iterations += 1
        run.dispatched(self, now, t - now, sum(c for _, c in chunks), d, len(chunks),
                       kv_sum - d + sum(c0 for c0, _ in chunks))


class _Run:
    """What a serving run counts while it goes: completions, tokens emitted in the arrival
    window, the time-integral of requests in the system, samples of the KV cache and queue,
    the iteration log."""

    def __init__(self, n: int, window_end: float, log_iterations: bool):
        self.n, self.window_end = n, window_end
        self.finished = self.rejected = self.rejected_late = 0
        self.in_system = 0
        self.area = 0.0
        self.clock = 0.0
        self.window_tokens = 0
        self.seq = 0
        self.iterations = 0
        self.max_running = 0
        self.log_iterations = log_iterations
        self.log: dict[str, list] = {"start_s": [], "latency_s": [], "prefill_tokens": [],
                                     "decodes": [], "replica": [], "chunks": [],
                                     "cached_kv_tokens": []}
        self.samples: list[tuple] = []
        self.replica = np.zeros(n, dtype=np.int64)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def advance(self, t: float) -> None:
        """Integrate the requests in the system up to ``t``."""
        if t > self.clock:
            self.area += self.in_system * (t - self.clock)
            self.clock = t

    def landed(self, end: float, emitted: int, done: int) -> None:
        self.finished += done
        self.in_system -= done
        if end <= self.window_end:
            self.window_tokens += emitted

    def dispatched(self, rep: _Replica, now: float, latency: float, prefill: int,
                   decodes: int, chunks: int, cached_kv_tokens: int) -> None:
        self.iterations += 1
        self.max_running = max(self.max_running, rep.s.running)
        if self.log_iterations:
            log = self.log
            log["start_s"].append(now)
            log["latency_s"].append(latency)
            log["prefill_tokens"].append(prefill)
            log["decodes"].append(decodes)
            log["replica"].append(rep.index)
            log["chunks"].append(chunks)
            log["cached_kv_tokens"].append(cached_kv_tokens)


def simulate_serving(cost: IterationCostModel, trace: Trace, scheduler: Scheduler,
                     block_size: int = BLOCK_SIZE,
                     memory_utilization: float = MEMORY_UTILIZATION,
                     slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                     economics: "Economics | dict | None" = None,
                     log_iterations: bool = False, preemption: str = "recompute",
                     router: str = "round_robin",
                     swap_space_bytes: float = SWAP_SPACE_BYTES,
                     progress: Callable[[int, int], None] | None = None,
                     decode_kv_step: int = 1) -> ServingResult:
    """Serve ``trace`` with ``scheduler`` on the design or system ``cost`` models (see the
    module docstring): one replica per data-parallel rank of the target (each a copy of
    ``scheduler``), arrivals shared by ``router`` (:data:`ROUTERS`), preemption by
    ``preemption`` (``recompute`` or ``swap`` into ``swap_space_bytes`` of host memory per
    device). ``progress(done, total)`` is called as every further 1 % of the requests ends
    (a long run shows how far it is). ``economics``: the cost-per-token parameters
    (:class:`simulators.economics.Economics` or a dict of them; defaults as documented
    there). ``decode_kv_step`` > 1: decode attention costed at the batch's mean KV length
    rounded up to a multiple of it (:meth:`IterationCostModel.cost`; a study's screening
    uses the KV block: never below the exact iteration, so never below its floors)."""
    from simulators.economics import Economics
    econ = Economics.of(economics)
    for key, v, lo, hi in (("block_size", block_size, 1, 4096),
                           ("decode_kv_step", decode_kv_step, 1, 4096)):
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise BadInput(key, v, f"expected an int in [{lo}, {hi}]")
    for key, v in (("slo_ttft_s", slo_ttft_s), ("slo_tpot_s", slo_tpot_s)):
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                  and 0 < v < 1e9):
            raise BadInput(key, v, "expected a time > 0, s")
    if isinstance(memory_utilization, bool) or not (
            isinstance(memory_utilization, (int, float)) and 0 < memory_utilization <= 1):
        raise BadInput("memory_utilization", memory_utilization, "expected a number in (0, 1]")
    check_serving_options(preemption, router, swap_space_bytes)
    if cost.stages > 1 and scheduler.name == "static":
        raise BadInput("scheduler", scheduler.name, "expected continuous or chunked with "
                       "pipeline stages (pp > 1)")
    longest = int((trace.input_len + trace.output_len).max())
    need = max(scheduler.token_budget, scheduler.max_batch, longest)
    if need > cost.max_tokens:
        raise BadInput("token_budget", need, f"expected at most the cost model's "
                       f"{cost.max_tokens} tokens per iteration")
    started = _time.perf_counter()
    largest = largest_iteration(scheduler, longest)
    kv_tokens = cost.kv_capacity_tokens(memory_utilization, largest, scheduler.max_batch)
    blocks = kv_tokens // block_size
    swap_blocks = int(swap_space_bytes // (cost.kv_bytes_per_token * block_size)) \
        if preemption == "swap" and cost.kv_bytes_per_token else 0
    if preemption == "swap":
        cost.swap_cost(1)                    # the device has a host link, or one line
    replicas = [_Replica(i, cost, trace, copy.deepcopy(scheduler),
                         KVCache(blocks, block_size), preemption, swap_blocks, decode_kv_step)
                for i in range(cost.replicas)]
    fits = replicas[0].kv.blocks - replicas[0].kv.watermark
    n = len(trace)
    arrival = trace.arrival_s
    first = np.full(n, np.nan)
    finish = np.full(n, np.nan)
    run = _Run(n, float(arrival[-1]) if n else 0.0, log_iterations)
    nxt, turn = 0, 0
    every = max(1, n // 50)
    report_every = max(1, n // 100)
    next_report = report_every
    while run.finished + run.rejected + run.rejected_late < n:
        a = float(arrival[nxt]) if nxt < n else math.inf
        rep = min(replicas, key=lambda x: x.t)
        if a == math.inf and rep.t == math.inf:
            break                                        # nothing left that can run
        if a <= rep.t:
            run.advance(a)
            if replicas[0].kv.blocks_for(trace.input_len[nxt] + trace.output_len[nxt]) > fits:
                run.rejected += 1                     # longer than the whole cache holds
            else:
                if router == "round_robin" or len(replicas) == 1:
                    to = replicas[turn % len(replicas)]
                    turn += 1
                else:
                    to = min(replicas, key=_Replica.outstanding)
                to.pending.append(nxt)
                run.replica[nxt] = to.index
                to.wake(a)
                run.in_system += 1
            nxt += 1
            continue
        now = rep.t
        run.advance(now)
        before = run.iterations
        late = run.rejected_late
        now = rep.boundary(now, first, finish, run,
                           a if DECODE_STRETCH and len(replicas) == 1 else None, every)
        run.in_system -= run.rejected_late - late
        if run.iterations != before and (run.iterations % every == 0 or not run.samples):
            run.samples.append(_sample(now, replicas, arrival, nxt))
        if progress is not None and run.finished >= next_report:
            progress(run.finished, n)
            next_report = run.finished + report_every
    end = max((float(x) for x in finish if not np.isnan(x)), default=run.clock)
    run.advance(end)
    if run.iterations and run.samples[-1][0] != end:
        run.samples.append(_sample(end, replicas, arrival, nxt))   # the end: all have left
    return _result(cost, trace, scheduler, replicas, run, first, finish, kv_tokens,
                   block_size, memory_utilization, slo_ttft_s, slo_tpot_s, econ,
                   preemption, router, started)


def largest_iteration(scheduler: Scheduler, longest: int) -> int:
    """The most tokens one iteration of ``scheduler`` can hold (what vLLM's profile run sizes
    the activations for, ``max_num_batched_tokens``): its token budget and batch, and, unless
    it chunks prompts, the longest prompt it may run alone (input and output of the longest
    request, recomputed after a preemption)."""
    if scheduler.name == "chunked":
        return max(scheduler.token_budget, scheduler.max_batch)
    return max(scheduler.token_budget, scheduler.max_batch, longest)


def _sample(now: float, replicas: list[_Replica], arrival: np.ndarray, nxt: int) -> tuple:
    """(time, KV occupancy of every replica's blocks together, requests running, waiting:
    the queues and those routed or arrived that join at the next boundary)."""
    blocks = sum(r.kv.blocks for r in replicas)
    free = sum(r.kv.free for r in replicas)
    running = sum(r.s.running for r in replicas)
    waiting = sum(len(r.s.waiting) + len(r.pending) + len(r.s.swapped) for r in replicas)
    waiting += int(np.searchsorted(arrival, now, "right")) - nxt
    return now, 1.0 - free / max(blocks, 1), running, waiting


def _result(cost: IterationCostModel, trace: Trace, scheduler: Scheduler,
            replicas: list[_Replica], run: _Run, first: np.ndarray, finish: np.ndarray,
            kv_tokens: int, block_size: int, memory_utilization: float,
            slo_ttft_s: float | None, slo_tpot_s: float | None, econ: "Economics",
            preemption: str, router: str, started: float) -> ServingResult:
    from simulators.economics import token_cost
    n = len(trace)
    arrival = trace.arrival_s
    done = ~np.isnan(finish)
    t0 = float(arrival[0]) if n else 0.0
    span = float(np.nanmax(finish) - t0) if done.any() else 0.0
    window = float(arrival[-1] - t0) if n else 0.0
    if window <= 0:
        window = span                       # one arrival instant: the run is the window
    in_window = done & (finish <= t0 + window)
    lat = request_latencies(arrival, first, finish, trace.output_len)
    generated = np.zeros(n, dtype=np.int64)
    preemptions = np.zeros(n, dtype=np.int64)
    swaps = np.zeros(n, dtype=np.int64)
    for rep in replicas:                     # each request lived on one replica
        generated += rep.s.generated
        preemptions += rep.s.preemptions
        swaps += rep.s.swaps
    tokens = int(generated[done].sum())
    window_tokens = run.window_tokens if window < span else tokens
    energy = sum(r.energy_j for r in replicas) + cost.static_w * span
    good = good_run = None
    if slo_ttft_s is not None or slo_tpot_s is not None:
        ok = done.copy()
        if slo_ttft_s is not None:
            ok &= (first - arrival) <= slo_ttft_s
        if slo_tpot_s is not None:
            with np.errstate(invalid="ignore", divide="ignore"):
                per = np.where(trace.output_len > 1, (finish - first) /
                               np.maximum(trace.output_len - 1, 1), 0.0)
            ok &= per <= slo_tpot_s
        good_run = int(ok.sum()) / span if span > 0 else 0.0
        good = int((ok & in_window).sum()) / window if window > 0 else 0.0
    cost_usd = cost.target.cost_usd()
    busy = sum(r.busy_s for r in replicas) / max(len(replicas), 1)
    money = token_cost(econ, tokens, span, busy, sum(r.energy_j for r in replicas),
                       cost.static_w, cost_usd, cost.target.devices)
    samples = run.samples
    idx = np.linspace(0, len(samples) - 1, min(len(samples), TIMELINE_POINTS)).astype(int) \
        if samples else np.zeros(0, dtype=int)
    timeline = [samples[i][0] for i in idx]
    occupancy = [samples[i][1] for i in idx]
    return ServingResult(
        model=cost.base.model, trace=trace.name,
        scheduler={**scheduler.describe(), "preemption": preemption,
                   "replicas": cost.replicas, "router": router,
                   "pipeline_stages": cost.stages},
        requests=n, completed=int(done.sum()), rejected=run.rejected + run.rejected_late,
        span_s=span, window_s=window,
        ttft_s=_percentiles(lat["ttft"]), tpot_s=_percentiles(lat["tpot"]),
        e2e_s=_percentiles(lat["e2e"]),
        throughput_tok_s=window_tokens / window if window > 0 else 0.0,
        throughput_req_s=int(in_window.sum()) / window if window > 0 else 0.0,
        goodput_req_s=good,
        throughput_run_tok_s=tokens / span if span > 0 else 0.0,
        throughput_run_req_s=int(done.sum()) / span if span > 0 else 0.0,
        goodput_run_req_s=good_run,
        slo={"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s}, output_tokens=tokens,
        energy_j=energy, energy_per_token_j=energy / tokens if tokens else float("nan"),
        cost_usd=cost_usd, cost_per_mtok_usd=money["cost_per_mtok_usd"],
        lifetime_years=econ.amortisation_years, usd_per_kwh=econ.usd_per_kwh,
        busy_s=busy, economics=money,
        kv_cache={"capacity_tokens": kv_tokens, "block_size": block_size,
                  "blocks": replicas[0].kv.blocks, "replicas": len(replicas),
                  "memory_utilization": memory_utilization,
                  "bytes_per_token": cost.kv_bytes_per_token,
                  "timeline_s": timeline, "occupancy": occupancy,
                  "peak_occupancy": max((x[1] for x in samples), default=0.0)},
        preemptions=int(preemptions.sum()), swaps=int(swaps.sum()),
        swapped_bytes=sum(r.swapped_tokens for r in replicas) * cost.kv_bytes_per_token,
        iterations=run.iterations, max_running=run.max_running,
        mean_in_system=run.area / span if span > 0 else 0.0,
        arrival_rate=trace.rate if n > 1 else 0.0,
        sim_wall_s=_time.perf_counter() - started, target=cost.target.describe(),
        per_request={"arrival_s": arrival.tolist(), "input_len": trace.input_len.tolist(),
                     "output_len": trace.output_len.tolist(), "first_token_s": first.tolist(),
                     "finish_s": finish.tolist(), "generated": generated.tolist(),
                     "preemptions": preemptions.tolist(), "swaps": swaps.tolist(),
                     "replica": run.replica.tolist()},
        iteration_log=run.log if run.log_iterations else {},
        queue={"timeline_s": list(timeline), "running": [samples[i][2] for i in idx],
               "waiting": [samples[i][3] for i in idx]})


def _advance(s: State, batch: Batch, now: float, first: np.ndarray,
             finish: np.ndarray, flown: bool = False) -> int:
    """Apply an iteration that ended at ``now``: chunks' KV, prompts completed emit their
    token (first token or, after a preemption, the next), decodes emit theirs; finished
    requests free their blocks; with ``flown`` (a pipeline's batch, its requests taken out
    while in flight: :meth:`State.fly`) the unfinished ones are put back. Returns how many
    finished."""
    done_now = []
    joined = []
    partial = []
    for r, _, c in batch.chunks:
        s.kv_tokens[r] += c
        s.prefill_left[r] -= c
        if s.prefill_left[r] == 0:
            if not flown:
                s.prefilling.remove(r)
            if s.generated[r] == 0:
                first[r] = now
            s.generated[r] += 1
            if s.generated[r] >= s.output_len[r]:
                done_now.append(r)
            else:
                joined.append(r)
        elif flown:
            partial.append(r)
    d = batch.decodes
    ended = d[:0]
    if len(d):
        s.kv_tokens[d] += 1
        s.generated[d] += 1
        ended = d[s.generated[d] >= s.output_len[d]]
        done_now.extend(ended.tolist())
    if flown:
        keep = d[~np.isin(d, ended)] if len(ended) else d
        if joined:
            keep = np.concatenate([keep, np.array(joined, dtype=np.int64)])
        s.land(partial, keep, len(batch.chunks) + len(d))
    elif done_now or joined:
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
