"""Evaluate one design point: build the design, fetch each workload's graph for its
architecture (captured once per architecture and cached), simulate, rate the architecture's
quality, and total the metrics (:mod:`dse.study.objectives`).

A design that cannot run a workload (invalid parameter combination, a tile that does not fit,
an architecture the model rejects) is *infeasible*: the evaluation carries the reason instead
of metrics. Points already evaluated in this process are answered from a cache (simulation is
deterministic), which matters when a sampler revisits a point of a discrete space.
"""

from __future__ import annotations

import gc
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from dse.errors import DSEError, InfeasibleDesign
from dse.study import objectives as obj
from dse.study.heterogeneous import (Heterogeneous, offchip_bandwidth_Bps, pe_count,
                                     segment_ops)
from dse.study.loader import ResolvedStudy
from dse.study.space import Point

#: Evaluations remembered per process, count [E: a few MB of metrics at most].
CACHE_SIZE = 4096


@dataclass(frozen=True)
class Evaluation:
    """``metrics`` (None when infeasible), ``infeasible`` (the reason, else None) and
    ``design``: what was evaluated (each design's full parameters, each workload's full
    architecture, the assignment)."""

    metrics: dict[str, float] | None
    infeasible: str | None
    design: dict[str, Any]
    fidelity: str = "event"


class Evaluator:
    """Evaluates points of one resolved study."""

    def __init__(self, study: ResolvedStudy, cache_size: int = CACHE_SIZE,
                 fidelity: str = "event"):
        """``fidelity``: ``event`` (SimPy) or ``fast`` (:mod:`simulators.fast`, no contention)."""
        self.study = study
        self.fidelity = fidelity
        self.quality = None
        if study.needs_quality:
            from dse.quality import QualityModel
            self.quality = QualityModel(study.quality)
        self._designs = {d.name: d for d in study.designs}
        self._cache: OrderedDict[str, Evaluation] = OrderedDict()
        self._cache_size = cache_size
        self._segments: dict[str, list[list[str]]] = {}
        # What evaluate_batch scored ahead: workloads by (label, arch), fast-path metrics (or
        # the infeasibility reason) by (label, arch, design), designs by (name, parameters).
        self._batch_workloads: dict[tuple[str, str], Any] = {}
        self._batch_fast: dict[tuple[str, str, str], dict[str, float] | str] = {}
        self._batch_designs: dict[str, Any] = {}
        self._batching = False

    def evaluate(self, point: Point) -> Evaluation:
        key = point.key()
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        ev = self._evaluate(point)
        self._cache[key] = ev
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return ev

    def evaluate_batch(self, points: list[Point]) -> list[Evaluation]:
        """:meth:`evaluate` of every point; at fidelity ``fast`` (one device, no system, not
        serving: the serving loop scores those) the designs that share a workload
        architecture are scored first in one :func:`~simulators.fast.evaluate_many` call
        (vectorised across designs where the template is, e.g. the npu): the same metrics as
        one by one."""
        study = self.study
        # The batch holds a graph per architecture: the cyclic collector would walk them all at
        # every pass (3x the time of re-shaping one); nothing here makes reference cycles.
        collecting = gc.isenabled()
        gc.disable()
        self._batching = True
        try:
            if (self.fidelity == "fast" and not study.spec.heterogeneous
                    and study.spec.system is None and study.spec.serving is None):
                self._prefetch([p for p in points if p.key() not in self._cache])
            return [self.evaluate(p) for p in points]
        finally:
            self._batching = False
            self._batch_workloads.clear()
            self._batch_fast.clear()
            self._batch_designs.clear()
            if collecting:
                gc.enable()

    def _prefetch(self, points: list[Point]) -> None:
        from dse import api
        from simulators.fast import evaluate_many
        groups: dict[tuple[str, str], list] = {}
        for point in points:
            try:
                design = self._build(point.design, point.hw[point.design])
            except DSEError:
                continue   # evaluate() says why
            for w in self.study.workloads:
                key = _arch_key(w.label, point.arch[w.label])
                if key not in self._batch_workloads:
                    try:
                        self._batch_workloads[key] = api.workload(
                            w.model, phase=w.phase, batch=w.batch, seq=w.seq, context=w.context,
                            dtype=w.dtype, arch=point.arch[w.label])
                    except DSEError:
                        continue
                groups.setdefault(key, []).append(design)
        for key, designs in groups.items():
            res = evaluate_many(self._batch_workloads[key], designs)
            for i, d in enumerate(designs):
                self._batch_fast[key + (_design_key(d),)] = res.infeasible[i] or res.metrics(i)

    # ------------------------------------------------------------------------------
    def _build(self, name: str, hw: dict[str, Any]):
        from accelerators.registry import get_template
        key = json.dumps([name, hw], sort_keys=True, default=str)
        hit = self._batch_designs.get(key)
        if hit is not None:
            return hit
        d = self._designs[name]
        design = get_template(d.template)(d.preset, **hw)
        if self._batching:
            self._batch_designs[key] = design
        return design

    def _evaluate(self, point: Point) -> Evaluation:
        from dse import api

        study = self.study
        described: dict[str, Any] = {
            "designs": {n: {"template": self._designs[n].template,
                            "preset": self._designs[n].preset, "hw": dict(hw)}
                        for n, hw in point.hw.items()},
            "arch": {w: dict(a) for w, a in point.arch.items()},
        }
        if point.assign:
            described["assign"] = {w: list(s) for w, s in point.assign.items()}
        if study.space.alternatives:
            described["design"] = point.design

        def infeasible(reason: str) -> Evaluation:
            return Evaluation(None, reason, described, self.fidelity)

        designs = {}
        for name, hw in point.hw.items():
            try:
                designs[name] = self._build(name, hw)
            except DSEError as exc:
                return infeasible(f"{name}: {exc}" if len(point.hw) > 1 else str(exc))
            described["designs"][name]["hw"] = dict(designs[name].hw)
        if study.spec.heterogeneous:
            combined = Heterogeneous(designs)
        else:
            combined = designs[point.design]
        system = layout = None
        if study.spec.system is not None:
            try:
                system, layout = self._system(combined, point)
            except DSEError as exc:
                return infeasible(str(exc.reason if isinstance(exc, InfeasibleDesign) else exc))
            described["system"] = {"preset": study.spec.system.preset, "sys": dict(system.hw)}
            described["parallel"] = layout.to_dict()

        per_workload: dict[str, dict[str, float]] = {}
        for w in study.workloads:
            akey = _arch_key(w.label, point.arch[w.label])
            try:
                wl = self._batch_workloads.get(akey) or (
                    self._train_workload(w, point.arch[w.label], layout)
                    if study.spec.training is not None else api.workload(
                        w.model, phase=w.phase, batch=w.batch, seq=w.seq, context=w.context,
                        dtype=w.dtype, arch=point.arch[w.label]))
            except DSEError as exc:
                return infeasible(f"{w.label}: {exc}")
            described["arch"][w.label] = dict(wl.arch)
            design = combined
            if isinstance(combined, Heterogeneous):
                design = combined.with_assignment(self._assignment(w.label, wl,
                                                                   point.assign[w.label]))
            try:
                if study.spec.training is not None:
                    result_metrics = self._train(w, point.arch[w.label], system, layout)
                elif study.spec.serving is not None:
                    result_metrics = self._serve(wl, design, system, layout)
                else:
                    result_metrics = (self._simulate(wl, design, akey) if system is None else
                                      _simulate_system(wl, system, layout))
            except DSEError as exc:
                reason = exc.reason if isinstance(exc, InfeasibleDesign) else str(exc)
                return infeasible(f"{w.label}: {reason}" if len(study.workloads) > 1 else reason)
            quality = None
            if self.quality is not None:
                q = self.quality(w.model, dict(wl.arch))
                quality = q.value
                described.setdefault("quality", {})[w.label] = {
                    "method": q.method, "raw": q.raw, "value": q.value, "detail": q.detail}
            per_workload[w.label] = obj.workload_metrics(
                result_metrics, wl.params, result_metrics.pop("model_flops", wl.flops), quality)
        extra = {}
        if isinstance(combined, Heterogeneous):
            pes = [pe_count(d) for d in designs.values()]
            if all(p is not None for p in pes):
                extra["total_pes"] = float(sum(pes))
            extra["total_bandwidth_Bps"] = sum(offchip_bandwidth_Bps(d) for d in designs.values())
        weights = {w.label: w.weight for w in study.workloads}
        if system is not None:
            combined = system
            extra["devices"] = float(system.devices)
        phys = combined.physical()
        design_metrics = {"area_mm2": combined.area_mm2(),
                          "cost_usd": phys.cost_usd if phys else float("nan"),
                          "tdp_w": phys.tdp_w if phys else float("nan")}
        metrics = obj.totals(per_workload, weights, design_metrics, extra)
        return Evaluation(metrics, None, described, self.fidelity)

    def _simulate(self, wl, design, akey: tuple[str, str] | None = None) -> dict[str, float]:
        """The design's metrics on one workload at this evaluator's fidelity (``akey``: the
        workload's key in what :meth:`evaluate_batch` scored ahead)."""
        if self.fidelity == "fast":
            ahead = self._batch_fast.get(akey + (_design_key(design),)) if akey else None
            if isinstance(ahead, str):
                raise InfeasibleDesign(ahead)
            if ahead is not None:
                return ahead
            from simulators.fast import evaluate_many
            res = evaluate_many(wl, [design])
            if res.infeasible[0]:
                raise InfeasibleDesign(res.infeasible[0])
            return res.metrics(0)
        from simulators.engine import simulate
        return simulate(wl, design).metrics()

    def _serve(self, base, design, system, layout) -> dict[str, float]:
        """Serving metrics of the design (or system) on the study's trace
        (:mod:`simulators.serving`), with the usual metrics read as the module
        :mod:`dse.study.objectives` says."""
        from dse import api
        sv = self.study.spec.serving
        r = api.serve(base, trace=sv.trace, rate=sv.rate, requests=sv.requests,
                      accelerator=design if system is None else None, system=system,
                      parallel=layout, scheduler=sv.scheduler, max_batch=sv.max_batch,
                      token_budget=sv.token_budget, arrival=sv.arrival,
                      burstiness=sv.burstiness, seed=sv.seed, slo_ttft_s=sv.slo_ttft_s,
                      slo_tpot_s=sv.slo_tpot_s, fidelity=self.fidelity)
        power = r.energy_j / r.span_s if r.span_s > 0 else 0.0
        return {**r.metrics(), "latency_s": r.e2e_s["mean"],
                "energy_j": r.energy_per_token_j, "avg_power_w": power,
                "edp": r.energy_per_token_j * r.e2e_s["mean"],
                "throughput": r.throughput_tok_s}

    def _train_workload(self, w, arch, layout):
        """The joint graph of one micro-batch of the training study's model (its first two
        blocks captured: :func:`workloads.train_build.zoo_train_workload`)."""
        from workloads.train_build import TEMPLATE_BLOCKS, zoo_train_workload
        from workloads.train_step import precision_from
        prec = precision_from(self.study.spec.training.precision)
        weights = prec.weights if prec.weights != prec.activations else None
        return zoo_train_workload(w.model, batch=layout.micro_batch, seq=w.seq,
                                  dtype=prec.activations, arch=arch, blocks=TEMPLATE_BLOCKS,
                                  weights=weights)

    def _train(self, w, arch, system, layout) -> dict[str, float]:
        """A training study's metrics (:mod:`simulators.training`): the step's, read as the
        usual metrics too (``latency_s`` the step time, ``energy_j`` its energy,
        ``throughput`` tokens/s)."""
        from simulators.training import simulate_training
        tr = self.study.spec.training
        r = simulate_training(self._train_workload(w, arch, layout), system, layout,
                              precision=tr.precision, optimizer=tr.optimizer,
                              optimizer_impl=tr.optimizer_impl, host=tr.host,
                              train_tokens=tr.tokens)
        m = r.metrics()
        return {**m, "latency_s": r.step_time_s, "energy_j": r.energy_per_step_j,
                "avg_power_w": r.avg_power_w, "edp": r.energy_per_step_j * r.step_time_s,
                "throughput": r.tokens_per_s, "model_flops": r.model_flops_per_step}

    def _system(self, design, point: Point):
        """The system of ``design`` and the layout of ``point``: the device count is the
        layout's unless ``sys.devices`` is fixed or searched."""
        from accelerators.system import System
        from workloads.parallel import layout_from
        if self.study.spec.training is not None:
            from workloads.train_parallel import train_layout_from
            layout = train_layout_from({**point.parallel,
                                        "global_batch": self.study.spec.training.global_batch})
            values = {"devices": layout.devices, **point.sys}
            return System(design, self.study.spec.system.preset, **values), layout
        layout = layout_from(dict(point.parallel))
        values = {"devices": layout.devices, **point.sys}
        return System(design, self.study.spec.system.preset, **values), layout

    def _assignment(self, label: str, wl, segment_subs: list[str]) -> dict[str, str]:
        key = json.dumps([label, wl.arch], sort_keys=True, default=str)
        groups = self._segments.get(key)
        if groups is None:
            groups = self._segments[key] = segment_ops(wl, len(segment_subs))
        return {name: sub for names, sub in zip(groups, segment_subs) for name in names}


def _simulate_system(wl, system, layout) -> dict[str, float]:
    from simulators.system_engine import simulate_system
    return simulate_system(wl, system, layout).metrics()


def _arch_key(label: str, arch: dict[str, Any]) -> tuple[str, str]:
    return label, json.dumps(arch, sort_keys=True, default=str)


def _design_key(design) -> str:
    return json.dumps([type(design).__name__, design.hw], sort_keys=True, default=str)
