"""``sampler: {name: nsga2-vectorized, operators: evox}``: NSGA-II's operators from EvoX
(Huang et al., "EvoX: a distributed GPU-accelerated framework for scalable evolutionary
computation", IEEE TEVC 2024; its tensorised NSGA-II after Liang et al., IEEE TEVC 2025)
instead of :mod:`dse.study.population`'s numpy ones: binary tournaments on (rank, crowding)
(``tournament_selection_multifit``), simulated binary crossover, polynomial mutation and
non-dominated sorting with crowding (``nd_environmental_selection``), as torch tensor
programs.

EvoX's NSGA-II knows box bounds only; a study's constraints enter through the objectives it
sorts: a feasible design keeps its objectives, an infeasible one gets every objective past the
worst feasible one by its summed violation, so any feasible design dominates any infeasible
one and less violation dominates more (Deb's constraint domination, as the numpy operators
apply it). EvoX draws from torch's global generator: each generation runs under a forked
generator seeded by (study seed, generation), so runs repeat and nothing else is disturbed.
Needs ``pip install 'accel-dse[evox]'`` (evox, pure Python over the torch this project already
requires).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import numpy as np

#: Distribution indices and crossover probability of SBX and polynomial mutation [P Deb and
#: Agrawal 1995; EvoX's defaults: 20, 20, crossover probability 1, mutation probability 1/d].
DIS_C, DIS_M, PRO_C = 20.0, 20.0, 1.0


def available() -> bool:
    try:
        import evox  # noqa: F401
    except ImportError:
        return False
    return True


@contextlib.contextmanager
def _float64() -> Iterator[None]:
    """torch's default dtype float64 while EvoX runs (its crowding distance allocates in the
    default dtype and scatters our float64 objectives into it), restored after."""
    import torch
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _sortable(f: np.ndarray, viol: np.ndarray) -> np.ndarray:
    """Objectives under which non-domination is constraint domination (module docstring)."""
    out = np.array(f, dtype=np.float64)
    feas = viol <= 0
    worst = out[feas].max(axis=0) if feas.any() else np.zeros(out.shape[1])
    worst = np.where(np.isfinite(worst), worst, 0.0)
    bad = np.minimum(viol[~feas], 1e300)
    out[~feas] = worst[None, :] + 1.0 + bad[:, None]
    return np.nan_to_num(out, nan=1e300, posinf=1e300)


def survivors(f: np.ndarray, viol: np.ndarray, n: int) -> np.ndarray:
    """Indices of the ``n`` rows kept (EvoX's non-dominated sorting and crowding)."""
    import torch
    from evox.operators.selection import nd_environmental_selection
    idx = torch.arange(len(f), dtype=torch.float64)[:, None]
    with _float64():
        kept, _, _, _ = nd_environmental_selection(idx, torch.as_tensor(_sortable(f, viol)), n)
    return kept[:, 0].to(torch.int64).numpy()


def breed(seed: int, generation: int, genes: np.ndarray, f: np.ndarray, viol: np.ndarray,
          n: int, d: int) -> np.ndarray:
    """``n`` children of ``genes`` (genes in [0, 1]) for generation ``generation``."""
    import torch
    from evox.operators.crossover import simulated_binary
    from evox.operators.mutation import polynomial_mutation
    from evox.operators.selection import crowding_distance, non_dominate_rank, \
        tournament_selection_multifit
    state = int(np.random.SeedSequence([seed, generation]).generate_state(1)[0])
    with torch.random.fork_rng(devices=[]), _float64():
        torch.manual_seed(state)
        if len(genes) < 2:
            return torch.rand(n, d, dtype=torch.float64).numpy()
        fs = torch.as_tensor(_sortable(f, viol))
        rank = non_dominate_rank(fs)
        crowd = crowding_distance(fs, torch.ones(len(fs), dtype=torch.bool))
        m = n + (n % 2)   # SBX pairs parents
        parents = tournament_selection_multifit(m, [rank.to(torch.float64),
                                                    -crowd.to(torch.float64)])
        x = torch.as_tensor(genes, dtype=torch.float64)[parents.reshape(-1)]
        child = simulated_binary(x, PRO_C, DIS_C)
        lb, ub = torch.zeros(d, dtype=torch.float64), torch.ones(d, dtype=torch.float64)
        child = polynomial_mutation(child, lb, ub, 1.0, DIS_M)
        return child.clamp(0.0, 1.0)[:n].numpy()
