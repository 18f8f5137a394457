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
import weakref

import numpy as np
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from dse.errors import DSEError, InfeasibleDesign
from dse.study import objectives as obj
from accelerators.heterogeneous import (Heterogeneous, offchip_bandwidth_Bps, pe_count,
                                     segment_ops)
from dse.study.loader import ResolvedStudy
from dse.study.space import Point, canonical_json
from workloads.zoo import get_model

#: Evaluations remembered per process, count [E: a few MB of metrics at most].
CACHE_SIZE = 4096
#: Fewest npu points of a batch scored as (design, architecture) arrays [E: below it the
#: arrays' set-up costs more than building each workload].
PAIR_MIN = 16
#: Step, tokens, decodes' mean KV length is rounded up to in a ``fidelity: multi`` serving
#: study's screening (its front is confirmed exactly): vLLM's KV block [D vLLM docs,
#: ``block_size`` = 16], so consecutive decode steps share one costing.
SCREEN_KV_STEP = 16


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
        # the infeasibility reason) by (label, arch, design), designs by (name, id of the
        # point's parameters dict) as (that dict, an npu_batch.NPUBatch or None, the design's
        # index in it or the design) (the batch holds the points).
        self._batch_workloads: dict[tuple[str, str], Any] = {}
        self._batch_fast: dict[tuple[str, str, str], dict[str, float] | str] = {}
        self._batch_designs: dict[tuple[str, int], tuple[dict[str, Any], Any, Any]] = {}
        # What was scored as (design, architecture) pairs, per point (by id, kept with the
        # point): (point, label -> (workload, metrics), the design's own metrics, its
        # parameters).
        self._pair_points: dict[int, tuple[Point, dict[str, tuple[Any, dict[str, float]]],
                                           dict[str, float], dict[str, Any]]] = {}
        self._batching = False
        spec = study.spec
        # A study whose points evaluate_batch may answer from the pairs it scored
        # (:meth:`_evaluate_scored`): one device, no system, no serving loop, no quality.
        self._plain = (fidelity == "fast" and self.quality is None and not spec.heterogeneous
                       and spec.system is None and spec.training is None
                       and spec.serving is None and spec.disaggregated is None
                       and spec.fleet is None)

    def evaluate(self, point: Point, key: str | None = None) -> Evaluation:
        """The point's evaluation (``key``: its :meth:`Point.key`, where the caller has it)."""
        if key is None:
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
            keys = [p.key() for p in points]
            if (self.fidelity == "fast" and not study.spec.heterogeneous
                    and study.spec.system is None and study.spec.serving is None
                    and study.spec.disaggregated is None and study.spec.fleet is None):
                self._prefetch([p for p, k in zip(points, keys) if k not in self._cache])
            return [self.evaluate(p, k) for p, k in zip(points, keys)]
        finally:
            self._batching = False
            self._batch_workloads.clear()
            self._batch_fast.clear()
            self._batch_designs.clear()
            self._pair_points.clear()
            if collecting:
                gc.enable()

    def _prefetch(self, points: list[Point]) -> None:
        from dse import api
        from simulators.fast import evaluate_many
        self._prebuild(points)
        self._prefetch_pairs(points)
        groups: dict[tuple[str, str], list] = {}
        every = len(self.study.workloads)
        for point in points:
            if len(self._scored_pairs(point)) == every:
                continue   # each workload scored as a (design, architecture) pair
            try:
                design = self._build(point.design, point.hw[point.design])
            except DSEError:
                continue   # evaluate() says why
            for w in self.study.workloads:
                fm = _formats(w, point)
                key = _arch_key(w.label, point.arch[w.label], fm)
                if key + (_design_key(design),) in self._batch_fast:
                    continue   # scored as a (design, architecture) pair
                wl = self._batch_workloads.get(key)
                if wl is None or isinstance(wl, _Workload):   # the real graph is needed
                    try:
                        self._batch_workloads[key] = api.workload(
                            w.model, phase=w.phase, batch=w.batch, seq=w.seq, context=w.context,
                            dtype=w.dtype, arch=point.arch[w.label], formats=fm)
                    except DSEError:
                        continue
                groups.setdefault(key, []).append(design)
        device = self.study.spec.sampler.device
        for key, designs in groups.items():
            if device is not None:   # the npu designs as one array program on the device
                from simulators.population import evaluate_population
                res = evaluate_population(self._batch_workloads[key], designs, device)
            else:
                res = evaluate_many(self._batch_workloads[key], designs)
            for i, d in enumerate(designs):
                self._batch_fast[key + (_design_key(d),)] = res.infeasible[i] or res.metrics(i)

    def _prebuild(self, points: list[Point]) -> None:
        """The points' npu designs built together (:func:`accelerators.npu_batch.build_npus`:
        equal to the constructor's), kept for :meth:`_build`; the rest are left to it."""
        from accelerators.npu import NPU
        from accelerators.npu_batch import build_batch
        from accelerators.registry import get_template
        npu = {n for n, d in self._designs.items() if get_template(d.template) is NPU}
        by_name: dict[str, list[dict[str, Any]]] = {}
        for point in points:
            if point.design in npu:
                by_name.setdefault(point.design, []).append(point.hw[point.design])
        for name, hws in by_name.items():
            todo = [hw for hw in hws if self._batch_slot(name, hw) is None]
            batch, slots = build_batch(self._designs[name].preset, todo)
            for hw, k in zip(todo, slots):
                if k is not None:
                    self._batch_designs[name, id(hw)] = hw, batch, k

    def _prefetch_pairs(self, points: list[Point]) -> None:
        """Score the points' (npu design, re-shaped architecture) pairs as arrays
        (:func:`simulators.population.evaluate_pairs`): no workload built per architecture.
        What it cannot score (another template, a family without arrays, an infeasible pair)
        is left to the per-architecture path, which says why."""
        from accelerators.npu import NPU
        from accelerators.npu_batch import NPUBatch
        from workloads import build, reshape
        pts, loose = [], []   # (point, batch, index); (point, design) of designs built alone
        for point in points:
            slot = self._batch_slot(point.design, point.hw[point.design])
            if slot is not None:
                pts.append((point, *slot))
                continue
            try:
                design = self._build(point.design, point.hw[point.design])
            except DSEError:
                continue
            if type(design) is NPU:
                loose.append((point, design))
        if loose:
            alone = NPUBatch.of([d for _, d in loose])
            pts += [(point, alone, k) for k, (point, _) in enumerate(loose)]
        if len(pts) < PAIR_MIN:
            return
        for w in self.study.workloads:
            groups: dict[tuple, list] = {}
            try:
                resolve = build.resolver(w.model, w.phase, w.batch, w.seq, w.context, w.dtype)
            except DSEError:
                continue   # evaluate() says why
            for point, batch, k in pts:
                if w.formats or point.formats:   # number formats: the per-architecture build
                    continue
                try:
                    args = resolve(point.arch[w.label])
                    fam = reshape._family(args)
                except DSEError:
                    continue
                if fam is None:
                    continue
                groups.setdefault(fam[2], []).append((point, batch, k, args, fam))
            for members in groups.values():
                self._score_family(w, members)
        every = len(self.study.workloads)
        for point, scored, _, _ in self._pair_points.values():
            if not (self._plain and len(point.hw) == 1 and len(scored) == every):
                # the general path (_evaluate) looks the pairs up by architecture and design
                dkey = _design_key(self._build(point.design, point.hw[point.design]))
                for label, (wl, metrics) in scored.items():
                    key = _arch_key(label, point.arch[label])
                    self._batch_fast[key + (dkey,)] = metrics
                    self._batch_workloads.setdefault(key, wl)

    def _score_family(self, w, members) -> None:
        from simulators.engine import throughput_of
        from simulators.population import evaluate_pairs
        from workloads import reshape, reshape_arrays
        _, _, _, args, fam = members[0]
        rule, variables, _ = fam
        template = reshape._template(args, fam, True)
        if template is None:
            return
        names = list(variables)
        arrays = reshape_arrays.family_arrays(template, args["dtype"], names,
                                              [m[4][1] for m in members[:3]])
        if arrays is None:
            return
        by_batch: dict[int, list] = {}
        for m in members:
            by_batch.setdefault(id(m[1]), []).append(m)
        spec = get_model(args["model"])
        seq = args["seq"] if spec.family in ("llm", "encoder") else 0
        shape = _Workload(args["arch"], 0, 0, args["phase"], args["batch"], seq)
        by_point = self._pair_points
        for group in by_batch.values():   # the designs of one batch as one array program
            batch = group[0][1]
            ks = [m[2] for m in group]
            vals = np.array([[m[4][1][n] for m in group] for n in names], dtype=np.int64)
            depth = np.array([m[3]["arch"][rule.depth] if rule.depth else 0 for m in group],
                             dtype=np.int64)
            try:
                res = evaluate_pairs(arrays, vals, depth, batch.arrays.take(ks), args["phase"],
                                     args["batch"], args["seq"])
            except (ValueError, OverflowError):   # sizes past int64: per architecture
                continue
            handled = np.flatnonzero(res.handled).tolist()
            at = [ks[i] for i in handled]
            for i, k, lat, energy, params, flops, area, cost, tdp in zip(
                    handled, at, *(x[handled].tolist() for x in (
                        res.latency_s, res.energy_j, res.params, res.flops)),
                    *(x[at].tolist() for x in (batch.area_mm2, batch.cost_usd, batch.tdp_w))):
                point, _, _, a, _ = group[i]
                metrics = {
                    "latency_s": lat, "energy_j": energy, "area_mm2": area,
                    "avg_power_w": energy / lat if lat > 0 else float("nan"),
                    "edp": energy * lat, "throughput": throughput_of(shape, lat)[0],
                    "cost_usd": cost, "tdp_w": tdp}
                wl = _Workload(a["arch"], int(params), int(flops), a["phase"], a["batch"], seq)
                entry = by_point.get(id(point))
                if entry is None or entry[0] is not point:
                    entry = by_point[id(point)] = (
                        point, {}, {"area_mm2": area, "cost_usd": cost, "tdp_w": tdp},
                        batch.hw[k])
                entry[1][w.label] = (wl, metrics)

    def _pair_entry(self, point: Point):
        """What :meth:`_score_family` scored of this very point: (point, label -> (workload,
        metrics), the design's own metrics, its parameters), or None."""
        hit = self._pair_points.get(id(point))
        return hit if hit is not None and hit[0] is point else None

    def _scored_pairs(self, point: Point) -> dict[str, tuple[Any, dict[str, float]]]:
        """Label -> (workload, metrics) of what :meth:`_score_family` scored of this point."""
        hit = self._pair_entry(point)
        return hit[1] if hit is not None else {}

    # ------------------------------------------------------------------------------
    def _build(self, name: str, hw: dict[str, Any]):
        from accelerators.registry import get_template
        hit = self._batch_design(name, hw)
        if hit is not None:
            return hit
        d = self._designs[name]
        design = get_template(d.template)(d.preset, **hw)
        if self._batching:
            self._batch_designs[name, id(hw)] = hw, None, design
        return design

    def _batch_design(self, name: str, hw: dict[str, Any]):
        """The design evaluate_batch built for this very parameters dict, or None."""
        hit = self._batch_designs.get((name, id(hw)))
        if hit is None or hit[0] is not hw:
            return None
        return hit[2] if hit[1] is None else hit[1].design(hit[2])

    def _batch_slot(self, name: str, hw: dict[str, Any]):
        """``(NPUBatch, index)`` where evaluate_batch built this very parameters dict's design
        in a batch, else None."""
        hit = self._batch_designs.get((name, id(hw)))
        return hit[1:] if hit is not None and hit[0] is hw and hit[1] is not None else None

    def _evaluate_scored(self, point: Point) -> Evaluation | None:
        """:meth:`_evaluate` of a point of a plain study whose every workload
        :meth:`evaluate_batch` scored as a (design, architecture) pair: the same steps on what
        was scored, without the general path's branches; None where anything is missing."""
        name = point.design
        hit = self._pair_entry(point)   # none where a number format is given
        study = self.study
        if hit is None or len(point.hw) != 1 or len(hit[1]) != len(study.workloads):
            return None   # _prefetch_pairs left this point's pairs to the general path
        _, scored, design_metrics, hw = hit
        per_workload: dict[str, dict[str, float]] = {}
        for w in study.workloads:
            wl, result_metrics = scored[w.label]
            per_workload[w.label] = obj.workload_metrics(
                result_metrics, wl.params, result_metrics.pop("model_flops", wl.flops), None)
        d = self._designs[name]
        described: dict[str, Any] = {
            "designs": {name: {"template": d.template, "preset": d.preset, "hw": dict(hw)}},
            "arch": {w: dict(scored[w][0].arch if w in scored else a)
                     for w, a in point.arch.items()}}
        if point.assign:
            described["assign"] = {w: list(s) for w, s in point.assign.items()}
        if study.space.alternatives:
            described["design"] = name
        metrics = obj.totals(per_workload, {w.label: w.weight for w in study.workloads},
                             design_metrics, {})
        return Evaluation(metrics, None, described, self.fidelity)

    def _evaluate(self, point: Point) -> Evaluation:
        if self._batching and self._plain:
            ev = self._evaluate_scored(point)
            if ev is not None:
                return ev
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
            hw_values = designs[name].hw
            described["designs"][name]["hw"] = dict(getattr(hw_values, "_values", hw_values))
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
            fm = _formats(w, point)
            akey = _arch_key(w.label, point.arch[w.label], fm)
            try:
                wl = self._batch_workloads.get(akey) or (
                    self._train_workload(w, point.arch[w.label], layout)
                    if study.spec.training is not None else api.workload(
                        w.model, phase=w.phase, batch=w.batch, seq=w.seq, context=w.context,
                        dtype=w.dtype, arch=point.arch[w.label], formats=fm))
            except DSEError as exc:
                return infeasible(f"{w.label}: {exc}")
            described["arch"][w.label] = dict(wl.arch)
            if fm:
                described.setdefault("formats", {})[w.label] = dict(fm)
            design = combined
            if isinstance(combined, Heterogeneous):
                design = combined.with_assignment(self._assignment(w.label, wl,
                                                                   point.assign[w.label]))
            try:
                if study.spec.training is not None:
                    result_metrics = self._train(w, point.arch[w.label], system, layout)
                elif study.spec.serving is not None:
                    result_metrics = self._serve(wl, design, system, layout)
                elif study.spec.disaggregated is not None:
                    result_metrics, pooled = self._disaggregate(wl, designs, point, described)
                elif study.spec.fleet is not None:
                    result_metrics = self._fleet(wl, design, described)
                else:
                    result_metrics = (self._simulate(wl, design, akey) if system is None else
                                      _simulate_system(wl, system, layout))
            except DSEError as exc:
                reason = exc.reason if isinstance(exc, InfeasibleDesign) else str(exc)
                return infeasible(f"{w.label}: {reason}" if len(study.workloads) > 1 else reason)
            quality = None
            if self.quality is not None:
                try:
                    q = self.quality(w.model, dict(wl.arch), formats=fm, base=w.dtype)
                except DSEError as exc:
                    if not fm:
                        raise
                    return infeasible(f"quality: {exc}")
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
        design_metrics = (pooled if study.spec.disaggregated is not None   # both pools' devices
                          else _design_metrics(combined))
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
        :mod:`dse.study.objectives` says. A ``multi`` study screens with decode KV lengths
        rounded up to :data:`SCREEN_KV_STEP` (never below the exact run's iterations)."""
        from dse import api
        sv = self.study.spec.serving
        screen = self.fidelity == "fast" and self.study.spec.fidelity == "multi"
        r = api.serve(base, trace=sv.trace, rate=sv.rate, requests=sv.requests,
                      accelerator=design if system is None else None, system=system,
                      parallel=layout, scheduler=sv.scheduler, max_batch=sv.max_batch,
                      token_budget=sv.token_budget, arrival=sv.arrival,
                      burstiness=sv.burstiness, seed=sv.seed, slo_ttft_s=sv.slo_ttft_s,
                      slo_tpot_s=sv.slo_tpot_s, fidelity=self.fidelity,
                      economics=sv.economics.model_dump() if sv.economics else None,
                      decode_kv_step=SCREEN_KV_STEP if screen else 1)
        return {**r.metrics(), "latency_s": r.e2e_s["mean"],
                "energy_j": r.energy_per_token_j, "avg_power_w": r.avg_power_w,
                "edp": r.edp, "throughput": r.throughput_tok_s}

    def _disaggregate(self, base, designs, point: Point, described: dict[str, Any]
                      ) -> tuple[dict[str, float], dict[str, float]]:
        """Metrics of the point's prefill and decode pools serving the study's trace
        (:mod:`simulators.disaggregated`), and the pools' devices' area, cost and TDP."""
        from dse.serving_api import serve_disaggregated
        dg = self.study.spec.disaggregated
        pool = point.pool
        specs, devices = {}, {"area_mm2": 0.0, "cost_usd": 0.0, "tdp_w": 0.0}
        for name in ("prefill", "decode"):
            design = designs[pool[f"{name}_device"]]
            tp, count = int(pool[f"{name}_tp"]), int(pool[f"{name}_count"])
            section = getattr(dg, name)
            specs[name] = {"accelerator": design, "count": count,
                           "parallel": {"tp": tp} if tp > 1 else None,
                           "max_batch": section.max_batch, "token_budget": section.token_budget}
            phys = design.physical()
            for key, value in (("area_mm2", design.area_mm2()),
                               ("cost_usd", phys.cost_usd if phys else float("nan")),
                               ("tdp_w", phys.tdp_w if phys else float("nan"))):
                devices[key] += value * tp * count
        described["pools"] = {k: {"device": pool[f"{k}_device"], "count": v["count"],
                                  "tp": int(pool[f"{k}_tp"])} for k, v in specs.items()}
        r = serve_disaggregated(base, specs["prefill"], specs["decode"], link=dg.link,
                                links=dg.links, trace=dg.trace, rate=dg.rate,
                                requests=dg.requests, seed=dg.seed, slo_ttft_s=dg.slo_ttft_s,
                                slo_tpot_s=dg.slo_tpot_s, fidelity=self.fidelity)
        s = r.summary()
        span = s["span_s"]
        energy = r.outcome.energy_j
        per_token = s["energy_per_token_j"]
        return ({**r.metrics(), "latency_s": s["e2e_s"]["mean"], "energy_j": per_token,
                 "avg_power_w": energy / span if span > 0 else 0.0,
                 "edp": per_token * s["e2e_s"]["mean"], "throughput": s["throughput_tok_s"]},
                devices)

    def _fleet(self, base, design, described: dict[str, Any]) -> dict[str, float]:
        """Metrics of the cheapest fleet of the menu and the design (:mod:`simulators.fleet`)
        and how much the design saves against the menu alone."""
        from dse.serving_api import derived_price_usd_per_h, fleet
        from simulators.iteration_cost import Target
        fs = self.study.spec.fleet
        menu = [e.model_dump() for e in fs.menu]
        price = fs.price_usd_per_h
        if price is None:
            basis = next((e for e in fs.menu if e.name == (fs.price_basis or fs.menu[0].name)))
            from dse import api
            ref = derived_price_usd_per_h(Target(design=api.accelerator(basis.accelerator)))
            price = derived_price_usd_per_h(Target(design=design)) * basis.price_usd_per_h / ref
        kw = dict(trace=fs.trace, rate=fs.rate, requests=fs.requests, seed=fs.seed,
                  slo_ttft_s=fs.slo_ttft_s, slo_tpot_s=fs.slo_tpot_s, fidelity=self.fidelity)
        f = fleet(base, menu + [{"name": "design", "accelerator": design,
                                 "price_usd_per_h": price}], confirm=fs.confirm, **kw)
        unusable = next(m["unusable"] for m in f.menu if m["name"] == "design")
        if unusable:
            raise InfeasibleDesign(unusable)
        try:
            alone = fleet(base, menu, confirm=False, **kw)
            alone_cost, alone_counts = alone.cost_usd_per_h, alone.counts
        except DSEError:            # the menu alone cannot serve the traffic: all saved
            alone_cost, alone_counts = float("inf"), None
        share = sum(b.share * f.routing[b.label].get("design", 0.0) for b in f.buckets)
        described["fleet"] = {"counts": f.counts, "price_usd_per_h": price,
                              "menu_only": alone_counts}
        c = f.confirm or {}
        return {**f.metrics(), "saving_vs_menu": 1.0 - f.cost_usd_per_h / alone_cost,
                "design_share": share, "latency_s": c.get("e2e_s", {}).get("mean", float("nan")),
                "energy_j": c.get("energy_per_token_j", float("nan")),
                "avg_power_w": float("nan"), "edp": float("nan"),
                "throughput": c.get("throughput_tok_s", float(fs.rate or 0.0))}

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


@dataclass(frozen=True)
class _Workload:
    """What a study reads of a workload scored as a (design, architecture) pair without
    building it: its full architecture, parameters and FLOPs (and its shape, for the
    throughput)."""

    arch: dict
    params: int
    flops: int
    phase: str
    batch: int
    seq: int


def _arch_key(label: str, arch: dict[str, Any], formats: dict[str, str] | None = None
              ) -> tuple[str, str]:
    if formats:
        return label, json.dumps([arch, formats], sort_keys=True, default=str)
    return label, _json_key(arch)


def _formats(w, point: Point) -> dict[str, str] | None:
    """The workload's number formats per role: the study file's, then the point's
    (``search.formats``); None without any."""
    fm = {**w.formats, **point.formats}
    return fm or None


#: Canonical JSON of the dicts a batch looks up several times, by id (the dict kept with its
#: key, so an id is never reused while its entry lives); cleared when it grows past a batch.
#: The dicts are sampled points' (``Point.arch``), never changed once made.
_KEYS: dict[int, tuple[dict, str]] = {}


def _json_key(values: dict[str, Any]) -> str:
    hit = _KEYS.get(id(values))
    if hit is not None and hit[0] is values:
        return hit[1]
    key = canonical_json(values)
    if len(_KEYS) > 4 * CACHE_SIZE:
        _KEYS.clear()
    _KEYS[id(values)] = (values, key)
    return key


#: What the study derives from a design object (its key, its own metrics), once per object:
#: designs are immutable; entries go with their designs (no attribute of the study's is set on
#: a hardware object).
_DERIVED: "weakref.WeakKeyDictionary[Any, dict[str, Any]]" = weakref.WeakKeyDictionary()


def _derived(design) -> dict[str, Any]:
    """The dict of values derived from ``design`` (empty at first; a fresh one where the
    design cannot be a weak key)."""
    try:
        out = _DERIVED.get(design)
        if out is None:
            out = _DERIVED[design] = {}
    except TypeError:   # not weakly referenceable or not hashable
        out = {}
    return out


def _design_metrics(design) -> dict[str, float]:
    """The design's own metrics (area, cost, TDP; NaN cost and TDP where the template models
    no silicon), computed once per design object; read only."""
    memo = _derived(design)
    dm = memo.get("metrics")
    if dm is None:
        phys = design.physical()
        dm = memo["metrics"] = {"area_mm2": design.area_mm2(),
                                "cost_usd": phys.cost_usd if phys else float("nan"),
                                "tdp_w": phys.tdp_w if phys else float("nan")}
    return dm


def _design_key(design) -> Any:
    memo = _derived(design)
    key = memo.get("key")
    if key is None:
        hw = design.hw
        key = (type(design).__name__,   # within this process only
               tuple(getattr(hw, "_values", hw).items()))
        try:
            hash(key)
        except TypeError:   # a parameter value that is a list or dict
            key = json.dumps([type(design).__name__, design.hw], sort_keys=True, default=str)
        memo["key"] = key
    return key
