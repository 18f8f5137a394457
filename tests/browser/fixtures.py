"""Studies built with Optuna directly, for the report tests and the size benchmark.

Each trial samples an ``npu`` design, simulates one real workload on it, and stores what the
report reads (see :mod:`dse.report.study_data`): objective values with metric names, every
metric as a user attr, the ``design`` user attr, constraints through ``constraints_func``
(system attr ``constraints``) and the thresholds as a study user attr. Designs that cannot run
store ``infeasible_reason`` and fail.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

#: The workload every trial runs: a GPT-2 decode step, batch 8, 512 tokens of KV cache.
WORKLOAD = {"model": "gpt2", "phase": "decode", "batch": 8, "context": 512, "dtype": "bf16"}

#: Constraint thresholds of the fixture study [E: chosen so that some of the sampled designs
#: meet both and some violate each]: average power <= 10 W and area <= 70 mm^2.
CONSTRAINTS = [{"metric": "avg_power_w", "max": 10.0}, {"metric": "area_mm2", "max": 70.0}]


def make_study(n_trials: int = 40, seed: int = 0, name: str = "npu-gpt2-decode",
               storage: str | None = None, objectives=("latency_s", "energy_j", "area_mm2"),
               directions=("minimize", "minimize", "minimize"), param_prefix: str = "hw.",
               workload: dict[str, Any] | None = None):
    """A finished study of ``n_trials`` NPU designs (``param_prefix`` is put before each
    hardware parameter name, so a test can use hostile names)."""
    import optuna
    from dse import api
    from dse.errors import DSEError
    from simulators.engine import simulate

    optuna.logging.set_verbosity(max(optuna.logging.get_verbosity(), optuna.logging.WARNING))
    wl = dict(workload or WORKLOAD)
    captured = api.workload(wl["model"], phase=wl.get("phase"), batch=wl.get("batch"),
                            context=wl.get("context"), dtype=wl.get("dtype", "bf16"))

    sampler = optuna.samplers.NSGAIISampler(seed=seed, population_size=20)
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                directions=list(directions))
    with warnings.catch_warnings():  # set_metric_names is "experimental" in Optuna 5
        warnings.simplefilter("ignore")
        study.set_metric_names(list(objectives))
    study.set_user_attr("constraints", CONSTRAINTS)

    def objective(trial):
        hw = {
            "rows": trial.suggest_int(param_prefix + "rows", 8, 256, log=True),
            "cols": trial.suggest_int(param_prefix + "cols", 8, 256, log=True),
            "arrays": trial.suggest_int(param_prefix + "arrays", 1, 8, log=True),
            "dataflow": trial.suggest_categorical(param_prefix + "dataflow", ["ws", "os", "is"]),
            "dram_bandwidth_Bps": trial.suggest_float(param_prefix + "dram_bandwidth_Bps", 5e10, 3e12, log=True),
            "ifmap_sram_kb": trial.suggest_int(param_prefix + "ifmap_sram_kb", 1, 16384, log=True),
        }
        design = {"accelerator": "npu:datacenter-bf16", "hw": hw, "workloads": [wl]}
        trial.set_user_attr("design", design)
        try:
            r = simulate(captured, api.accelerator(design["accelerator"], hw))
        except DSEError as exc:
            trial.set_user_attr("infeasible_reason", str(exc))
            return tuple(math.nan for _ in objectives)  # Optuna records the trial as FAIL
        metrics = r.metrics()
        for k, v in metrics.items():
            trial.set_user_attr(k, v)
        trial.set_user_attr("throughput_unit", r.throughput_unit)
        trial.set_user_attr("simulator_version", r.simulator_version)
        for c in CONSTRAINTS:
            trial.set_constraint(f"{c['metric']}<={c['max']:g}", metrics[c["metric"]] - c["max"])
        return tuple(metrics[o] for o in objectives)

    study.optimize(objective, n_trials=n_trials)
    return study
