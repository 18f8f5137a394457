"""``sampler: {name: nsga2-vectorized, population_size: N}``: a population-based multi-objective
search (NSGA-II: Deb et al. 2002, IEEE TEC 6(2) [P]) that proposes and scores a whole
generation at once, beside Optuna's one-trial-at-a-time samplers.

Genes are numbers in [0, 1], one per search dimension (ints and floats through their range,
log-scaled where the dimension is; categoricals by index); a generation is an ``(N, d)`` array.
Parents are picked by binary tournament (rank, then crowding distance), children by uniform
crossover and Gaussian mutation, survivors by constraint-domination sorting (feasible first,
infeasible ranked by their summed relative violation) and crowding distance, all in numpy.
A generation is scored by :meth:`dse.study.evaluate.Evaluator.evaluate_batch` (at fidelity
``fast`` the designs that share a workload architecture are one :func:`evaluate_many` call,
each architecture built without re-capture, :mod:`workloads.reshape`), and stored in the
study's Optuna storage as finished trials with the same parameters, user attributes and
constraints a worker writes (:func:`dse.study.workers.outcome`), so reports, ``fidelity:
multi`` confirmation and resume work unchanged. A resumed run starts from the stored trials as
its parents. In one process (SQLite, one worker) it evolves in memory and stores each
generation as it is scored; with several workers or a PostgreSQL storage every worker runs
:func:`run_shared`: each generation is bred into the storage as WAITING trials and workers
claim parts of it under the study's count lock, evaluate them as a batch and finish them in
one transaction, so the study reaches its trial count exactly, each trial evaluated once. A
generation is bred from a generator seeded by the study's seed and its number: same seed, same
generations, whichever process breeds them.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from dse.study.space import Dimension

NAME = "nsga2-vectorized"
#: Population size when the study file gives none [E: Optuna's NSGA-II default is 50].
DEFAULT_POPULATION = 100
#: Probability that a child gene comes from its first parent (uniform crossover) [E].
CROSSOVER = 0.5
#: Standard deviation of a mutated gene, in [0, 1] units [E].
MUTATION_SIGMA = 0.15


class Encoding:
    """Search dimensions <-> genes in [0, 1]."""

    def __init__(self, dims: list[Dimension]):
        if any(d.condition is not None for d in dims):
            raise ValueError("conditional dimensions")   # the loader refuses such studies
        self.dims = dims
        self.categorical = np.array([d.kind == "categorical" for d in dims], dtype=bool)

    def decode(self, genes: np.ndarray) -> list[dict[str, Any]]:
        """Parameter values (Optuna name -> value) of each row of ``genes``."""
        cols = [self._decode_dim(d, genes[:, j]) for j, d in enumerate(self.dims)]
        return [{d.name: col[i] for d, col in zip(self.dims, cols)} for i in range(len(genes))]

    @staticmethod
    def _decode_dim(d: Dimension, u: np.ndarray) -> list:
        if d.kind == "categorical":
            n = len(d.choices)
            return [d.choices[i] for i in np.minimum((u * n).astype(np.int64), n - 1)]
        lo, hi = float(d.low), float(d.high)
        if d.log:
            x = np.exp(math.log(lo) + u * (math.log(hi) - math.log(lo)))
        else:
            x = lo + u * (hi - lo)
        if d.step:
            x = lo + np.round((x - lo) / d.step) * d.step
        x = np.clip(x, lo, hi)
        if d.kind == "int":
            return [int(v) for v in np.clip(np.round(x), lo, hi)]
        return [float(v) for v in x]

    def encode(self, params: dict[str, Any]) -> np.ndarray:
        """The genes of stored parameter values."""
        out = np.empty(len(self.dims))
        for j, d in enumerate(self.dims):
            v = params[d.name]
            if d.kind == "categorical":
                out[j] = (list(d.choices).index(v) + 0.5) / len(d.choices)
                continue
            lo, hi = float(d.low), float(d.high)
            out[j] = ((math.log(v) - math.log(lo)) / (math.log(hi) - math.log(lo)) if d.log
                      else (v - lo) / (hi - lo)) if hi > lo else 0.0
        return np.clip(out, 0.0, 1.0)


# ----------------------------------------------------------------------------- selection
def dominates(f: np.ndarray, viol: np.ndarray) -> np.ndarray:
    """``D[i, j]``: i constraint-dominates j (objectives ``f`` (N, m) minimised, ``viol`` (N,)
    the summed violation, 0 when feasible)."""
    feas = viol <= 0
    n = len(f)
    le, lt = np.ones((n, n), dtype=bool), np.zeros((n, n), dtype=bool)
    for k in range(f.shape[1]):   # per objective: no (N, N, m) array reduced over its last axis
        a, b = f[:, k, None], f[None, :, k]
        le &= a <= b
        lt |= a < b
    both = feas[:, None] & feas[None, :]
    return ((both & le & lt) | (feas[:, None] & ~feas[None, :])
            | (~feas[:, None] & ~feas[None, :] & (viol[:, None] < viol[None, :])))


def fronts(f: np.ndarray, viol: np.ndarray) -> np.ndarray:
    """Non-domination rank of each row (0: the first front)."""
    d = dominates(f, viol)
    count = d.sum(axis=0)
    rank = np.full(len(f), -1)
    current = np.flatnonzero(count == 0)
    r = 0
    while current.size:
        rank[current] = r
        count = count - d[current].sum(axis=0)
        count[rank >= 0] = -1
        current = np.flatnonzero(count == 0)
        r += 1
    return rank


def crowding(f: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Crowding distance of each row within its front (inf at a front's ends)."""
    out = np.zeros(len(f))
    for r in np.unique(rank):
        idx = np.flatnonzero(rank == r)
        if idx.size <= 2:
            out[idx] = np.inf
            continue
        for m in range(f.shape[1]):
            order = idx[np.argsort(f[idx, m], kind="stable")]
            span = f[order[-1], m] - f[order[0], m]
            out[order[[0, -1]]] = np.inf
            if span > 0 and np.isfinite(span):
                out[order[1:-1]] += (f[order[2:], m] - f[order[:-2], m]) / span
    return out


def survivors(f: np.ndarray, viol: np.ndarray, n: int, operators: str = "numpy") -> np.ndarray:
    """Indices of the ``n`` rows NSGA-II keeps: by rank, then larger crowding distance
    (``operators: evox``: EvoX's environmental selection)."""
    if operators == "evox":
        from dse.study import evox_operators
        return evox_operators.survivors(f, viol, n)
    rank = fronts(f, viol)
    crowd = crowding(f, rank)
    return np.lexsort((-crowd, rank))[:n]


def children(rng: np.random.Generator, genes: np.ndarray, f: np.ndarray, viol: np.ndarray,
             n: int, categorical: np.ndarray) -> np.ndarray:
    """``n`` children of the population ``genes``: binary tournaments, uniform crossover,
    Gaussian mutation (a categorical gene is redrawn instead)."""
    rank = fronts(f, viol)
    crowd = crowding(f, rank)
    size, d = genes.shape

    def tournament() -> np.ndarray:
        a, b = rng.integers(0, size, n), rng.integers(0, size, n)
        better = (rank[a] < rank[b]) | ((rank[a] == rank[b]) & (crowd[a] >= crowd[b]))
        return np.where(better, a, b)

    p1, p2 = tournament(), tournament()
    take = rng.random((n, d)) < CROSSOVER
    child = np.where(take, genes[p1], genes[p2])
    mutate = rng.random((n, d)) < max(1.0 / d, 0.1)
    noise = np.clip(child + rng.normal(0.0, MUTATION_SIGMA, (n, d)), 0.0, 1.0)
    redraw = rng.random((n, d))
    child = np.where(mutate, np.where(categorical[None, :], redraw, noise), child)
    return child


def breed(seed: int, generation: int, genes: np.ndarray, f: np.ndarray, viol: np.ndarray,
          n: int, enc: Encoding, operators: str = "numpy") -> np.ndarray:
    """The ``n`` children of generation ``generation`` (random genes while fewer than two
    parents), from a generator seeded by ``(seed, generation)``: whichever process breeds a
    generation breeds the same one. ``operators``: ``numpy`` (this module's) or ``evox``
    (:mod:`dse.study.evox_operators`)."""
    if operators == "evox":
        from dse.study import evox_operators
        return evox_operators.breed(seed, generation, genes, f, viol, n, len(enc.dims))
    rng = np.random.default_rng(np.random.SeedSequence([seed, generation]))
    if len(genes) < 2:
        return rng.random((n, len(enc.dims)))
    return children(rng, genes, f, viol, n, enc.categorical)


# ----------------------------------------------------------------------------- the run
def scores(resolved, trials: list[FrozenTrial]) -> tuple[np.ndarray, np.ndarray]:
    """Minimised objectives and summed violation of stored trials (an infeasible or failed
    trial: violation inf)."""
    f = np.full((len(trials), len(resolved.objectives)), np.inf)
    viol = np.zeros(len(trials))
    for i, t in enumerate(trials):
        if t.state != TrialState.COMPLETE or t.values is None:
            viol[i] = np.inf
            continue
        f[i] = [o.sign * v for o, v in zip(resolved.objectives, t.values)]
        cons = t.system_attrs.get("constraints") or []
        viol[i] = sum(max(0.0, c) for c in cons)
    return f, viol


def run(resolved, study: optuna.Study, evaluator, seed: int, target: int,
        count: Callable[[], int], to_trial: Callable[[dict, Any], FrozenTrial],
        store: Callable[[list[FrozenTrial]], None],
        on_trial: Callable[[FrozenTrial], None] | None = None) -> int:
    """Evolve until the study holds ``target`` trials (``count()`` says how many it holds);
    returns the trials this run stored. ``to_trial(params, evaluation)`` is the finished
    trial a worker would store, ``store(trials)`` stores a generation."""
    space = resolved.space
    enc = Encoding(space.dimensions)
    names = set(space.names())
    size = resolved.spec.sampler.population_size or DEFAULT_POPULATION
    ops = resolved.spec.sampler.operators
    done = [t for t in study.get_trials(deepcopy=False)
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED) and set(t.params) == names]
    genes = np.array([enc.encode(t.params) for t in done]).reshape(len(done), len(enc.dims))
    f, viol = scores(resolved, done)
    if len(done) > size:
        keep = survivors(f, viol, size, ops)
        genes, f, viol = genes[keep], f[keep], viol[keep]
    stored = 0
    generation = 0
    while True:
        n = min(size, target - count())
        if n <= 0:
            return stored
        generation += 1
        new = breed(seed, generation, genes, f, viol, n, enc, ops)
        values = enc.decode(new)
        evs = evaluator.evaluate_batch([space.point(v) for v in values])
        trials = [to_trial(v, ev) for v, ev in zip(values, evs)]
        store(trials)
        stored += len(trials)
        if on_trial is not None:
            for t in trials:
                on_trial(t)
        nf, nv = scores(resolved, trials)
        genes, f, viol = (np.concatenate([genes, new]), np.concatenate([f, nf]),
                          np.concatenate([viol, nv]))
        keep = survivors(f, viol, size, ops)
        genes, f, viol = genes[keep], f[keep], viol[keep]


# ----------------------------------------------------------------------------- shared by workers
#: Study system attribute holding the shared run's state: the last generation bred and the
#: numbers of the trials it was bred from.
STATE_KEY = "dse_population"
#: Trial system attribute: the generation a trial belongs to.
GENERATION_KEY = "dse_generation"
#: How long a worker waits before looking again while another worker finishes the trials of
#: the current generation, s [E].
WAIT_S = 0.2


def claim_size(size: int) -> int:
    """Trials a worker takes from a generation at a time: an eighth of it, at least 8 [E: big
    enough to keep evaluate_batch's arrays full, small enough that several workers share a
    generation]."""
    return max(8, -(-size // 8))


def _bred(resolved, storage, study_id: int, seed: int, target: int, evaluated: int) -> int:
    """Breed the next generation into the storage as WAITING trials (the caller holds the
    count lock and has seen no WAITING and no RUNNING trial): its parents are the survivors
    of the previous generation's parents and its finished trials (on a study without this
    state, of every evaluated trial in the space). Returns how many trials it added."""
    space = resolved.space
    enc = Encoding(space.dimensions)
    names = set(space.names())
    size = resolved.spec.sampler.population_size or DEFAULT_POPULATION
    ops = resolved.spec.sampler.operators
    n = min(size, target - evaluated)
    if n <= 0:
        return 0
    state = storage.get_study_system_attrs(study_id).get(STATE_KEY)
    storage._stale.add(study_id)   # read what every worker finished
    trials = storage.get_all_trials(study_id, deepcopy=False)
    finished = (TrialState.COMPLETE, TrialState.PRUNED)
    if state is None:
        generation = 0
        pool = [t for t in trials if t.state in finished and set(t.params) == names]
    else:
        generation = int(state["generation"])
        by_number = {t.number: t for t in trials}
        pool = [by_number[k] for k in state["parents"] if k in by_number]
        pool += [t for t in trials if t.state in finished
                 and t.system_attrs.get(GENERATION_KEY) == generation]
    genes = np.array([enc.encode(t.params) for t in pool]).reshape(len(pool), len(enc.dims))
    f, viol = scores(resolved, pool)
    if len(pool) > size:
        keep = survivors(f, viol, size, ops)
        pool = [pool[i] for i in keep]
        genes, f, viol = genes[keep], f[keep], viol[keep]
    generation += 1
    values = enc.decode(breed(seed, generation, genes, f, viol, n, enc, ops))
    dists = space.distributions()
    storage.add_finished_trials(study_id, [optuna.trial.create_trial(
        state=TrialState.WAITING, params=v, distributions={k: dists[k] for k in v},
        system_attrs={GENERATION_KEY: generation}) for v in values])
    storage.set_study_system_attr(study_id, STATE_KEY, {
        "generation": generation, "parents": [t.number for t in pool]})
    return n


def run_shared(resolved, storage, study_id: int, evaluator, lock, seed: int, target: int,
               to_trial: Callable[[dict, Any], FrozenTrial],
               on_trial: Callable[[FrozenTrial], None] | None = None,
               heartbeat=None, stop: Callable[[], bool] | None = None) -> int:
    """One of several workers (processes, machines) growing one population study through its
    storage: under the count lock a worker claims WAITING trials of the current generation
    (:meth:`~dse.study.batched_storage.BatchedStorage.claim_waiting`), or, when none is left
    and none is running, breeds the next generation into the storage (:func:`_bred`, the same
    generation whoever breeds it); it evaluates what it claimed as one batch and finishes
    those trials in one transaction. Nothing else schedules the work: the database's rows and
    the lock are the whole protocol. Stops when the study holds ``target`` evaluated designs
    (trials in every state but FAIL, WAITING and RUNNING ones included). Returns the trials
    this worker finished."""
    from dse.study.storage import FAIL_REASON
    size = resolved.spec.sampler.population_size or DEFAULT_POPULATION
    chunk = claim_size(size)
    done = 0
    while stop is None or not stop():
        with lock.held():
            claimed = storage.claim_waiting(study_id, chunk)
            if claimed and heartbeat is not None:   # before the lock goes: see storage.py
                for t in claimed:
                    storage.record_heartbeat(t._trial_id)
                heartbeat.trial_ids = [t._trial_id for t in claimed]
            if not claimed:
                counts = storage.count_by_state(study_id)
                evaluated = sum(counts.values()) - counts.get(TrialState.FAIL, 0)
                if evaluated >= target:
                    return done
                if counts.get(TrialState.RUNNING, 0) == 0:
                    _bred(resolved, storage, study_id, seed, target, evaluated)
                    continue
        if not claimed:   # another worker is finishing this generation
            time.sleep(WAIT_S)
            continue
        try:
            evs = evaluator.evaluate_batch([resolved.space.point(t.params) for t in claimed])
            results = [to_trial(t.params, ev) for t, ev in zip(claimed, evs)]
        except (KeyboardInterrupt, SystemExit):
            raise
        except Exception as exc:   # the search goes on; the reason is stored
            reason = f"{type(exc).__name__}: {exc}"[:2000]
            results = [optuna.trial.create_trial(state=TrialState.FAIL,
                                                 user_attrs={FAIL_REASON: reason})
                       for _ in claimed]
        storage.finish_claimed(study_id, [(t._trial_id, r) for t, r in zip(claimed, results)])
        if heartbeat is not None:
            heartbeat.trial_ids = []
        done += len(claimed)
        if on_trial is not None:
            for t, r in zip(claimed, results):
                on_trial(FrozenTrial(number=t.number, state=r.state, value=None,
                                     values=r.values, datetime_start=t.datetime_start,
                                     datetime_complete=r.datetime_complete, params=t.params,
                                     distributions=t.distributions, user_attrs=r.user_attrs,
                                     system_attrs={**t.system_attrs, **r.system_attrs},
                                     intermediate_values={}, trial_id=t._trial_id))
    return done
