"""What one LLM serving iteration costs on a design or a system, cheaply.

A serving loop runs tens of thousands of iterations, each a different mix of prefill chunks and
decodes; simulating each would take minutes. :class:`IterationCostModel` splits an iteration
(:mod:`workloads.iteration`) into what depends only on its token count ``T`` and what depends
on its requests:

    latency(T, decodes, chunks) = g(T) + sum over attention ops of cost(attention of the mix)
                                  + cost(LM head on one token per sequence)
                                  + sum over MoE layers of cost(MoE layer on T tokens)

* ``g(T)``: the iteration graph without its attention ops, LM head and MoE layers, simulated
  (fast path, SimPy engine or system engine, collectives included) at a grid of token counts
  and interpolated linearly in between (:func:`token_grid`: both sides of every
  ``GRID_STEP``-token tile boundary, so GPU tile and wave steps are followed); MoE layers are
  costed at ``T`` itself (the experts ``T`` tokens route to are a concave count: a straight
  line between grid points under-counts them, which put a Mixtral serving run's energy 0.2 %
  under its floor);
* attention: each attention op of the iteration (one device's share under tensor
  parallelism), costed with the template's own ``cost()`` for the iteration's decodes (their
  count and mean KV length) and for its prefill chunks (their count, mean query and key
  lengths, exact causal FLOPs), times the number of layers holding such an op; the LM head
  likewise, on the iteration's decodes and prompt chunks.

The sum is exact where the step is a chain of ops (a GPU stream; a decoder layer's attention
sits between projections it depends on): what remains is the interpolation of ``g`` and the
mean-length attention of several prompt chunks. ``tests/test_serving.py`` checks the model
against direct simulation of whole random iterations of the shapes serving makes (within 2 %;
``benchmarks/serving_validation.py`` measures 0.25 % at most on one GPU or NPU, 0.85 % on a
tp=2 system). Energy is split the same way;
static power is not included per iteration (the serving loop charges it over wall time).

Systems: the model is fitted on one replica (``dp`` = 1, one microbatch): with ``pp > 1`` an
iteration's latency is its trip through every stage (send/recv between them included) and
``stages`` tells the serving loop to pipeline it; ``dp`` replicas share the system's static
power and cost. Memory is sized per device (:meth:`IterationCostModel.kv_capacity_tokens`:
vLLM's ``gpu_memory_utilization`` the one reserve; the activations derived from the largest
iteration's graph; the stage with the least room binds). A preempted request's KV copied to
host memory and back (``preemption="swap"``) crosses each device's host link
(:meth:`IterationCostModel.swap_cost`).
"""

from __future__ import annotations

import bisect
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from accelerators.base import Template
from dse.errors import BadInput, InfeasibleDesign
from workloads import ir
from workloads.footprint import memory_footprint
from workloads.formats import kv_element_bytes
from workloads.iteration import (attention_ops, decode_attention, logit_ops, prefill_attention,
                                 scale_op, scale_tokens, token_wise)
from workloads.parallel import Layout, parallelize, replace
from workloads.requests import KV_LENS

#: ``g`` is simulated at 1, 2, 3, 4, 6, ... 48 tokens, then at every multiple of ``GRID_STEP``
#: and one token past it, so a step where a tile of rows fills up is followed exactly [E: the
#: gpu's GEMM cost steps every 64 rows (gpu_efficiency.py); checked by tests/test_serving.py].
GRID_STEP = 64
#: vLLM's default share of device memory the engine may use (weights, activations, KV cache)
#: [D vLLM docs, ``gpu_memory_utilization`` = 0.9].
MEMORY_UTILIZATION = 0.9


@dataclass
class Target:
    """Where iterations run: one ``design``, or a ``system`` of devices with a ``layout``;
    ``fidelity`` ``fast`` (no contention, single designs) or ``event`` (SimPy)."""

    design: Template | None = None
    system: object | None = None
    layout: Layout | None = None
    fidelity: str = "fast"

    def __post_init__(self):
        if self.fidelity not in ("fast", "event"):
            raise BadInput("fidelity", self.fidelity, "expected fast or event")
        if (self.design is None) == (self.system is None):
            raise BadInput("target", None, "expected a design or a system")

    @property
    def device(self) -> Template:
        return self.design if self.design is not None else self.system.device(0)

    @property
    def devices(self) -> int:
        return 1 if self.system is None else self.system.devices

    @property
    def replicas(self) -> int:
        """Data-parallel replicas serving independently."""
        return 1 if self.system is None else self.layout.dp

    @property
    def stages(self) -> int:
        """Pipeline stages of a replica."""
        return 1 if self.system is None else self.layout.pp

    def replica(self) -> "Target":
        """One replica: the first ``tp x pp x ep`` devices of the system with the layout's
        ``dp`` 1 and one microbatch (a serving iteration is never split); ``self`` on a
        design or where that is already so."""
        lay = self.layout
        if self.system is None or (lay.dp == 1 and lay.microbatches == 1):
            return self
        from dataclasses import replace as _replace
        one = _replace(lay, dp=1, microbatches=1)
        sysm = self.system
        if lay.dp > 1:
            from accelerators.system import System
            values = dict(sysm.hw)
            values.update(devices=one.devices, shape="",
                          group_size=min(int(values["group_size"]), one.devices))
            try:
                sysm = System(sysm.designs[:one.devices], None, **values)
            except BadInput as exc:
                raise BadInput("parallel.dp", lay.dp, f"expected replicas the system's "
                               f"{sysm.hw.topology} can be cut into ({exc})") from None
        return Target(system=sysm, layout=one, fidelity=self.fidelity)

    def static_power_w(self) -> float:
        return (self.design or self.system).static_power_w()

    def cost_usd(self) -> float:
        phys = (self.design or self.system).physical()
        return float(phys.cost_usd) if phys is not None else float("nan")

    def share(self, w: ir.Workload) -> ir.Workload:
        """One device's part of ``w`` (``w`` itself on a single design)."""
        if self.system is None:
            return w
        return parallelize(w, self.layout).graphs[0]

    def stage_shares(self, w: ir.Workload) -> list[ir.Workload]:
        """The part of ``w`` a device of each pipeline stage holds (``[w]`` on a design)."""
        if self.system is None:
            return [w]
        lay = self.layout
        graphs = parallelize(w, lay).graphs
        return [graphs[lay.rank(pp=k)] for k in range(lay.pp)]

    def layer_share(self, w: ir.Workload) -> ir.Workload:
        """A tensor (and expert) parallel rank's part of every layer of ``w``: the stages of a
        pipeline together."""
        if self.system is None:
            return w
        from dataclasses import replace as _replace
        return parallelize(w, _replace(self.layout, pp=1, dp=1, microbatches=1)).graphs[0]

    def describe(self) -> dict[str, Any]:
        """The design (or the system and its layout), as results describe them."""
        if self.system is None:
            return self.design.describe()
        return {**self.system.describe(), "layout": self.layout.to_dict()}

    def run(self, w: ir.Workload, fill: bool = False) -> tuple[float, float]:
        """(latency, energy with the static energy over that latency) of ``w``, s and J; with
        ``fill``, a pipeline's time from empty (a prefill) rather than its steady state."""
        if self.system is not None:
            from simulators.system_engine import simulate_system
            r = simulate_system(w, self.system, self.layout)
            if fill and r.fill_latency_s != r.latency_s:
                static = self.system.static_power_w()
                return r.fill_latency_s, r.energy_j + static * (r.fill_latency_s - r.latency_s)
            return r.latency_s, r.energy_j
        if self.fidelity == "fast":
            from simulators.fast import evaluate_many
            f = evaluate_many(w, [self.design])
            if f.infeasible[0]:
                raise InfeasibleDesign(f.infeasible[0])
            return float(f.latency_s[0]), float(f.energy_j[0])
        from simulators.engine import simulate
        r = simulate(w, self.design)
        return r.latency_s, r.energy_j


def token_grid(max_tokens: int) -> list[int]:
    """The token counts ``g`` is simulated at (see the module docstring), up to ``max_tokens``."""
    pts = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48}
    for k in range(GRID_STEP, max_tokens + GRID_STEP, GRID_STEP):
        pts.update((k, k + 1))
    return sorted(x for x in pts if x <= max_tokens) + ([max_tokens] if max_tokens % GRID_STEP
                                                        and max_tokens > 48 else [])


class IterationCostModel:
    """Latency and dynamic energy of serving iterations of ``base`` (a decode step of batch 1,
    :func:`workloads.iteration.scale_tokens`) on ``target``, up to ``max_tokens`` tokens per
    iteration."""

    def __init__(self, base: ir.Workload, target: Target, max_tokens: int,
                 fitted: dict | None = None):
        self.base, self.target, self.max_tokens = base, target, int(max_tokens)
        rep = target.replica()
        self.replica_target = rep
        self.stages, self.replicas = target.stages, target.replicas
        self.static_w = target.static_power_w()
        # each layer's attention runs on the ranks of one stage
        self._per_layer_devices = rep.devices // rep.stages
        self.grid = np.array(token_grid(self.max_tokens), dtype=float)
        loaded = fitted is not None
        if fitted is None:
            fitted = self._size(base, rep)
        # g on the grid, simulated when an iteration first needs a point (None until then)
        self._grid_list = [float(x) for x in self.grid]
        self._bodies: Callable[[int], ir.Workload] | None = None
        none = [None] * len(self._grid_list)
        self._lat_list = _floats(fitted.get("g_latency_s") or none)
        self._en_list = _floats(fitted.get("g_energy_j") or none)
        self._decode_cost: dict[tuple, tuple[float, float]] = {}
        #: the device's decode attention reads each request's KV length, not the mean
        #: (``Template.DECODE_COST_BY_MEAN``): :meth:`cost` then needs ``kv_lens``
        self.per_request = not type(target.device).DECODE_COST_BY_MEAN
        # the attention ops of a rank's share of every layer, grouped by what they compute
        share = rep.layer_share(base)
        groups: dict[str, list] = {}
        for op in attention_ops(share):
            key = repr(sorted((k, v) for k, v in op.attrs.items()))
            groups.setdefault(key, [op, 0])[1] += 1
        self.attention = [(op, n) for op, n in groups.values()]
        # each group's attention for one decode of one KV token, scaled per iteration
        self._decode_one = [decode_attention(op, (1,)) for op, _ in self.attention]
        heads = logit_ops(share)
        self.lm_head = [op for op in share.ops if op.name in heads]
        self._lm_cost: dict[int, tuple[float, float]] = {}
        # MoE layers, costed at each iteration's token count: the experts its tokens route
        # to are a concave count, which interpolating g would under-count
        moe: dict[str, list] = {}
        for op in share.ops:
            if op.kind == ir.MOE:
                moe.setdefault(repr(sorted(op.attrs.items())), [op, 0])[1] += 1
        self.moe = [(op, n) for op, n in moe.values()]
        self._moe_cost: dict[int, tuple[float, float]] = {}
        self.device = target.device
        # memory of a device of each stage: weights and one token's KV (its layers)
        self.stage_weights_bytes = [float(x) for x in fitted["stage_weights_bytes"]]
        self.stage_kv_bytes_per_token = [float(x) for x in fitted["stage_kv_bytes_per_token"]]
        self.weights_bytes = max(self.stage_weights_bytes)
        self.kv_bytes_per_token = max(self.stage_kv_bytes_per_token)
        self._activations: dict[tuple[int, int], list[float]] = {
            tuple(int(x) for x in k.split(",")): v
            for k, v in fitted.get("activation_bytes", {}).items()}
        self.activation_bytes = max(self.stage_activation_bytes(self.max_tokens))
        #: where :mod:`simulators.cost_cache` keeps this fit, and what the file holds
        self.cache_key: str | None = None
        self.stored: tuple | None = self.held() if loaded else None

    def _size(self, base: ir.Workload, rep: Target) -> dict:
        """One device's memory per stage: weights and KV bytes per token."""
        stages = rep.stage_shares(base)
        return {"stage_weights_bytes": [float(memory_footprint(g).weights_bytes)
                                        for g in stages],
                "stage_kv_bytes_per_token": [_kv_bytes_per_token(g) for g in stages]}

    def _fit(self, indices: Sequence[int]) -> None:
        """Simulate the token-wise body of an iteration at the grid points ``indices``
        (the graphs shared by every design of the base: :func:`grid_bodies`). Points are
        simulated as iterations first need them (a serving run touches a few dozen of a
        large grid's), each as the whole grid's fit would: the same numbers."""
        rep = self.replica_target
        static = rep.static_power_w()
        if self._bodies is None:
            self._bodies = grid_bodies(self.base)
        bodies = self._bodies
        for i in indices:
            latency, energy = rep.run(bodies(int(self._grid_list[i])), fill=rep.stages > 1)
            self._lat_list[i] = float(latency)
            self._en_list[i] = float(energy - static * latency)

    def g_points(self) -> tuple[np.ndarray, np.ndarray]:
        """(latency s, dynamic energy J) of the token-wise body at every grid point,
        simulating those no iteration has needed yet."""
        self._fit([i for i, v in enumerate(self._lat_list) if v is None])
        return np.array(self._lat_list), np.array(self._en_list)

    def held(self) -> tuple[frozenset, int]:
        """What :meth:`fitted` holds, in short: the activations sized and the grid points
        simulated (a file of the same is not rewritten)."""
        return (frozenset(self._activations),
                sum(v is not None for v in self._lat_list))

    def fitted(self) -> dict:
        """What the fit measured (JSON-able; :mod:`simulators.cost_cache` keeps it on disk):
        the body's latency and dynamic energy on the grid (None at points not simulated
        yet), each stage's weights and KV bytes per token, and the activations sized so
        far."""
        return {"grid": self.grid.tolist(), "g_latency_s": list(self._lat_list),
                "g_energy_j": list(self._en_list),
                "stage_weights_bytes": self.stage_weights_bytes,
                "stage_kv_bytes_per_token": self.stage_kv_bytes_per_token,
                "activation_bytes": {f"{t},{q}": v for (t, q), v in self._activations.items()}}

    # -------------------------------------------------------------------------- memory
    def stage_activation_bytes(self, tokens: int, sequences: int | None = None) -> list[float]:
        """The largest set of live activations of an iteration of ``tokens`` tokens and
        ``sequences`` sequences sampling (the LM head's rows; default ``tokens``) on a device
        of each stage, B: derived from the iteration's graph
        (:func:`workloads.footprint.peak_live_activation_bytes`), as vLLM measures it with a
        profile run of its largest batch."""
        tokens = max(1, int(tokens))
        seqs = tokens if sequences is None else max(1, min(int(sequences), tokens))
        key = (tokens, seqs)
        hit = self._activations.get(key)
        if hit is None:
            w = scale_tokens(self.base, tokens, seqs)
            hit = self._activations[key] = [
                float(memory_footprint(g).activation_bytes)
                for g in self.replica_target.stage_shares(w)]
        return hit

    def kv_capacity_tokens(self, memory_utilization: float = MEMORY_UTILIZATION,
                           iteration_tokens: int | None = None,
                           sequences: int | None = None) -> int:
        """Tokens of KV cache one replica holds: on a device of each stage, its memory x
        ``memory_utilization`` (vLLM's ``gpu_memory_utilization``, the one reserve) less its
        weights and the activations of the largest iteration (``iteration_tokens`` tokens,
        ``sequences`` sampling; default the model's ``max_tokens``), over one token's KV
        bytes there; the fewest over the stages. :class:`InfeasibleDesign` when nothing is
        left."""
        cap = self.device.memory_capacity_bytes()
        if cap is None:
            raise InfeasibleDesign(f"{self.device.name} models no memory capacity: its KV "
                                   "cache cannot be sized")
        acts = self.stage_activation_bytes(iteration_tokens or self.max_tokens, sequences)
        tokens = None
        for weights, kv, act in zip(self.stage_weights_bytes, self.stage_kv_bytes_per_token,
                                    acts):
            free = cap * memory_utilization - weights - act
            n = int(free // kv) if kv else 0
            if n < 1:
                raise InfeasibleDesign(
                    f"{self.base.model} does not fit for serving: weights {weights / 1e9:.3g}"
                    f" GB + activations {act / 1e9:.3g} GB leave no KV cache in "
                    f"{memory_utilization:g} x {cap / 2**30:.4g} GiB")
            tokens = n if tokens is None else min(tokens, n)
        return int(tokens)

    def swap_cost(self, tokens: int) -> tuple[float, float]:
        """(time s, energy J) of copying ``tokens`` tokens of KV between every device of a
        replica and host memory, each over its own host link at the link's sustained rate
        (:mod:`accelerators.interconnect`) [E: a pinned-memory copy reaches about what NCCL
        does over PCIe]; :class:`BadInput` when the device has no host link."""
        from accelerators.interconnect import LINK_NAMES, get_link
        name = self.device.hw.get("host_interface") if hasattr(self.device, "hw") else None
        if name not in LINK_NAMES:
            raise BadInput("preemption", "swap", f"expected recompute: {self.device.name} has "
                           "no host link to swap KV over")
        link = get_link(name)
        nbytes = tokens * self.kv_bytes_per_token
        return (nbytes / link.effective_Bps,
                nbytes * link.energy_j_per_byte * self.replica_target.devices)

    # ---------------------------------------------------------------------------- cost
    def _g(self, tokens: int) -> tuple[float, float]:
        if tokens > self.max_tokens:
            raise BadInput("iteration tokens", tokens, f"expected at most {self.max_tokens}")
        if tokens < 1:
            return 0.0, 0.0
        grid = self._grid_list
        i = bisect.bisect_left(grid, tokens)
        lat = self._lat_list
        if grid[i] == tokens:
            if lat[i] is None:
                self._fit([i])
            return lat[i], self._en_list[i]
        if lat[i] is None or lat[i - 1] is None:
            self._fit([j for j in (i - 1, i) if lat[j] is None])
        x0, x1 = grid[i - 1], grid[i]
        f = (tokens - x0) / (x1 - x0)
        lat, en = self._lat_list, self._en_list
        return lat[i - 1] + f * (lat[i] - lat[i - 1]), en[i - 1] + f * (en[i] - en[i - 1])

    def _decode_attention(self, decodes: int, mean: int,
                          kv_lens: tuple[int, ...] | None = None) -> tuple[float, float]:
        """(latency s, dynamic energy J) of every attention layer's decode attention for
        ``decodes`` requests of ``mean`` KV tokens each, kept per pair: the templates cost a
        decode batch by its count and mean length (their latency is exact for any lengths of
        that mean; the KV bytes, and so the energy, are those of ``decodes x mean`` tokens,
        within half a token per request of the batch's). With ``kv_lens`` (a template that
        reads each request's length) the requests' own lengths, in the order they run (a
        round-robin channel assignment follows it), the last few mixes kept (consecutive
        iterations differ)."""
        key = (decodes, mean) if kv_lens is None else kv_lens
        hit = self._decode_cost.get(key)
        if hit is None:
            if len(self._decode_cost) > (500_000 if kv_lens is None else 4096):
                self._decode_cost.clear()
            tokens = decodes * mean if kv_lens is None else sum(kv_lens)
            lat = energy = 0.0
            for (op, n), one in zip(self.attention, self._decode_one):
                c = self.device.cost(_decode_op(one, decodes, tokens, mean, kv_lens))
                lat += n * c.latency_s
                energy += n * c.total_energy_j * self._per_layer_devices
            hit = self._decode_cost[key] = (lat, energy)
        return hit

    def cost(self, decodes: int, decode_kv_tokens: int,
             chunks: Sequence[tuple[int, int]] = (), kv_step: int = 1,
             kv_lens: Sequence[int] | None = None) -> tuple[float, float]:
        """(latency s, dynamic energy J) of an iteration of ``decodes`` decode tokens whose KV
        lengths (the new token included) sum to ``decode_kv_tokens``, and prefill ``chunks``
        ``(cached, new)``. ``kv_step`` > 1: the decodes' mean KV length rounded up to a
        multiple of it (a screening estimate: consecutive decode steps share one costing, and
        it is never below the exact one, as more KV read and attended is never cheaper).
        ``kv_lens``: each decode's KV length (summing to ``decode_kv_tokens``), which a
        device whose decode cost is not the mean's (:attr:`per_request`) needs; each is
        then rounded up to a multiple of ``kv_step``."""
        tokens = decodes + sum(c for _, c in chunks)
        lat, energy = self._g(tokens)
        dev = self.device
        seqs = decodes + len(chunks)
        hit = self._lm_cost.get(seqs)
        if hit is None:
            costs = [dev.cost(scale_op(op, seqs)) for op in self.lm_head]
            hit = self._lm_cost[seqs] = (
                sum(c.latency_s for c in costs),
                sum(c.total_energy_j for c in costs) * self._per_layer_devices)
        lat += hit[0]
        energy += hit[1]
        if self.moe and tokens:
            hit = self._moe_cost.get(tokens)
            if hit is None:
                costs = [(n, dev.cost(scale_op(op, tokens))) for op, n in self.moe]
                hit = self._moe_cost[tokens] = (
                    sum(n * c.latency_s for n, c in costs),
                    sum(n * c.total_energy_j for n, c in costs) * self._per_layer_devices)
            lat += hit[0]
            energy += hit[1]
        if decodes and self.per_request:
            if kv_lens is None or len(kv_lens) != decodes:
                raise BadInput("kv_lens", kv_lens, f"each of the {decodes} decodes' KV length: "
                               f"{self.device.name}'s decode time depends on every one")
            lens = tuple(-(-int(x) // kv_step) * kv_step for x in kv_lens)
            a_lat, a_energy = self._decode_attention(
                decodes, max(1, round(sum(lens) / decodes)), lens)
        elif decodes:
            mean = max(1, round(decode_kv_tokens / decodes))
            a_lat, a_energy = self._decode_attention(decodes, -(-mean // kv_step) * kv_step)
        if decodes:
            lat += a_lat
            energy += a_energy
        if chunks:
            for op, n in self.attention:
                c = dev.cost(prefill_attention(op, chunks))
                lat += n * c.latency_s
                energy += n * c.total_energy_j * self._per_layer_devices
        return lat, energy


#: Token-wise bodies kept, per base graph: ``{key: (body, {tokens: graph})}``, the bases used
#: last kept [E: a 32-layer Llama-2-7B grid is 74 graphs, ~100 MB; a study searches a few
#: widths and depths at once].
GRID_BASES = 6
_GRIDS: "OrderedDict[str, tuple[ir.Workload, dict[int, ir.Workload]]]" = OrderedDict()


def grid_bodies(base: ir.Workload) -> Callable[[int], ir.Workload]:
    """``tokens ->`` :func:`token_wise` ``base`` on ``tokens`` tokens (:func:`scale_tokens`),
    each graph built once per graph of ``base`` and token count and shared by every design
    fitted on it: the fit's graphs depend on the architecture only, so a study's designs of
    one architecture share them and what is derived from a graph once (the fast path's
    structure, planned graphs, the memory footprint: :mod:`workloads.memo`). Keyed by the
    graph's content (:func:`simulators.cost_cache.fingerprint`), not the object: a study
    loads an architecture's graph afresh per design."""
    from simulators.cost_cache import fingerprint
    key = json.dumps(fingerprint(base), sort_keys=True, default=str)
    hit = _GRIDS.get(key)
    if hit is None:
        hit = _GRIDS[key] = (token_wise(base), {})
        if len(_GRIDS) > GRID_BASES:
            _GRIDS.popitem(last=False)
    else:
        _GRIDS.move_to_end(key)
    body, graphs = hit

    def at(tokens: int) -> ir.Workload:
        w = graphs.get(tokens)
        if w is None:
            w = graphs[tokens] = scale_tokens(body, tokens)
        return w
    return at


def _floats(values: Sequence) -> list[float | None]:
    return [None if v is None else float(v) for v in values]


def _kv_bytes_per_token(w: ir.Workload) -> float:
    """KV-cache bytes one token takes in ``w``'s attention layers (keys and values of every
    KV head, in the KV cache's number format)."""
    return float(sum(int(op.attrs.get("kv_heads", op.attrs["heads"]))
                     * ir.kv_row_elements(op.attrs) * kv_element_bytes(op)
                     for op in attention_ops(w)))


def _decode_op(one: ir.Op, decodes: int, kv_tokens: int, mean: int,
               kv_lens: tuple[int, ...] | None = None) -> ir.Op:
    """:func:`decode_attention` for ``decodes`` requests of ``kv_tokens`` KV tokens in all,
    from ``one`` (the op's :func:`decode_attention` for one request of one KV token); with
    ``kv_lens`` the per-request lengths too (npu_pim reads them; every other template the
    mean)."""
    a = one.attrs
    (_, h, _, d), (_, kvh, _, _), (_, _, _, dv) = one.input_shapes
    return replace(one, flops=one.flops * kv_tokens, kv_bytes_read=one.kv_bytes_read * kv_tokens,
                   activation_bytes_read=one.activation_bytes_read * decodes,
                   activation_bytes_written=one.activation_bytes_written * decodes,
                   input_shapes=((decodes, h, 1, d), (decodes, kvh, mean, d),
                                 (decodes, kvh, mean, dv)),
                   output_shapes=((decodes, h, 1, dv),),
                   attrs={**{k: v for k, v in a.items() if k != KV_LENS}, "batch": decodes,
                          "kv_len": mean, "causal_flops": one.flops * kv_tokens,
                          **({KV_LENS: kv_lens} if kv_lens is not None else {})})
