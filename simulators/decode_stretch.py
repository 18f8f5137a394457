"""Decode stretches of a serving run, stepped in one go: the same numbers as iteration by
iteration.

Between an arrival and the next finish, a continuous-batching replica (vLLM, prefill first;
Sarathi's chunked prefill alike) with nothing waiting, prefilling or swapped runs the same
decodes every iteration: each request adds one KV token, a request whose KV fills its last
block takes one more, nobody finishes, nobody is admitted. :func:`run_decodes` runs such
iterations without the scheduler and the per-iteration array work
(:mod:`simulators.serving`'s loop): the blocks every iteration takes are counted at once
(the stretch stops before the first iteration that would preempt), each iteration is costed
(:meth:`IterationCostModel.cost`, the same call as the loop's dispatch), the clock, energy,
the requests-in-system integral, the window's tokens, the samples and the iteration log are
advanced in the loop's order (the same floating-point operations), and the requests' tokens,
KV and blocks are added once at the end. It stops before the first iteration that would end at
or after the next arrival, finish a request, or need a preemption; the loop takes it from there.
``tests/test_serving_screen.py`` checks whole runs against the loop alone, field by field.
"""

from __future__ import annotations

import numpy as np

#: Fewest iterations worth stepping in one go [E: below it the set-up costs more than the loop].
MIN_STRETCH = 2


def run_decodes(rep, now: float, horizon: float, run, every: int) -> float:
    """Step ``rep``'s decode iterations from ``now`` while each ends before ``horizon`` (the
    next arrival) and none finishes a request or preempts one; returns the time the last one
    ended (``now`` when none ran). ``run`` is the serving run's :class:`_Run`, ``every`` its
    sampling period in iterations."""
    s, kv = rep.s, rep.s.kv
    d = s.decoding
    n = len(d)
    if (n == 0 or rep.stages != 1 or rep.flying or rep.pending or s.waiting or s.prefilling
            or s.swapped or s._swap_out or s._swap_in or rep.sched.name == "static"):
        return now
    left = s.output_len[d] - s.generated[d]
    k_max = int(left.min()) - 1                 # iterations before the first finish
    if k_max < MIN_STRETCH:
        return now
    bs = kv.block_size
    kv0 = s.kv_tokens[d]
    first = (-kv0) % bs                         # the first iteration each takes a block at
    steps = np.arange(0, k_max, bs)
    at = (first[:, None] + steps[None, :]).ravel()
    grow = np.bincount(at[at < k_max], minlength=k_max)
    taken = np.cumsum(grow)
    short = np.flatnonzero(taken > kv.free)
    if len(short):
        k_max = int(short[0])                   # that iteration would preempt: the loop's
    if k_max < MIN_STRETCH:
        return now
    cost, kv_step, stages = rep.cost, rep.kv_step, rep.stages
    kv_sum = int(kv0.sum()) + n
    running = s.running
    free0, blocks = kv.free, max(kv.blocks, 1)
    k = 0
    while k < k_max:
        latency, e = cost.cost(n, kv_sum, [], kv_step, kv0 + 1 + k if cost.per_request else None)
        stage_s = latency / stages + 0.0
        t = max(now, rep.stage_free[0]) + stage_s
        if t >= horizon:
            break                               # the arrival comes first: the loop's turn
        rep.stage_free[0] = t
        run.next_seq()
        rep.energy_j += e + 0.0
        rep.busy_s += stage_s
        rep.iterations += 1
        run.dispatched(rep, now, t - now, 0, n, 0, kv_sum - n)
        if run.iterations % every == 0 or not run.samples:
            run.samples.append((now, 1.0 - (free0 - int(taken[k])) / blocks, running, 0))
        run.advance(t)
        run.landed(t, n, 0)
        now = t
        kv_sum += n
        k += 1
    if k:
        took = np.where(first < k, (k - 1 - first) // bs + 1, 0)
        s.blocks[d] += took
        kv.free -= int(took.sum())
        s.kv_tokens[d] += k
        s.generated[d] += k
    return now
