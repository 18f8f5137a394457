"""The Optuna sampler a study asks for, seeded.

``tpe`` is multivariate (``group`` keeps conditional parameters of alternative designs apart)
with the constant liar for concurrent workers; ``grid`` visits :meth:`Dimension.grid` values;
``cmaes`` handles one objective; ``gp`` and ``qmc`` need scipy, ``cmaes`` the cmaes package
(the loader says so before a run starts).
"""

from __future__ import annotations

import warnings

import optuna

from dse.study.loader import ResolvedStudy


def make_sampler(study: ResolvedStudy, seed: int) -> optuna.samplers.BaseSampler:
    s = study.spec.sampler
    name = s.name
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            kw = {} if s.n_startup_trials is None else {"n_startup_trials": s.n_startup_trials}
            return optuna.samplers.TPESampler(seed=seed, multivariate=True,
                                              group=study.space.alternatives,
                                              constant_liar=True, **kw)
        if name == "nsga2":
            kw = {} if s.population_size is None else {"population_size": s.population_size}
            return optuna.samplers.NSGAIISampler(seed=seed, **kw)
        if name == "nsga3":
            kw = {} if s.population_size is None else {"population_size": s.population_size}
            return optuna.samplers.NSGAIIISampler(seed=seed, **kw)
        if name == "random" or name == "nsga2-vectorized":   # the latter never asks a trial
            # (dse/study/population.py proposes whole generations); random for anything else
            return optuna.samplers.RandomSampler(seed=seed)
        if name == "grid":
            space = {d.name: d.grid(s.grid_points) for d in study.space.dimensions}
            return optuna.samplers.GridSampler(space, seed=seed)
        if name == "qmc":
            return optuna.samplers.QMCSampler(seed=seed, scramble=True)
        if name == "gp":
            kw = {} if s.n_startup_trials is None else {"n_startup_trials": s.n_startup_trials}
            return optuna.samplers.GPSampler(seed=seed, **kw)
        if name == "cmaes":
            kw = {} if s.n_startup_trials is None else {"n_startup_trials": s.n_startup_trials}
            return optuna.samplers.CmaEsSampler(seed=seed, **kw)
    raise ValueError(f"unknown sampler {name!r}")  # the spec's Literal forbids this
