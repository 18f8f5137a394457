"""What one LLM serving iteration costs on a design or a system, cheaply.

A serving loop runs tens of thousands of iterations, each a different mix of prefill chunks and
decodes; simulating each would take minutes. :class:`IterationCostModel` splits an iteration
(:mod:`workloads.iteration`) into what depends only on its token count ``T`` and what depends
on its requests:

    latency(T, decodes, chunks) = g(T) + sum over attention ops of cost(attention of the mix)
                                  + cost(LM head on one token per sequence)

* ``g(T)``: the iteration graph without its attention ops and LM head, simulated (fast path,
  SimPy engine or system engine, collectives included) at a grid of token counts and
  interpolated linearly in between (:func:`token_grid`: both sides of every ``GRID_STEP``-token tile boundary, so
  GPU tile and wave steps are followed);
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

Serving on a system supports tensor parallelism (``pp = dp = 1``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from accelerators.base import Template
from dse.errors import BadInput, InfeasibleDesign
from workloads import ir
from workloads.footprint import memory_footprint
from workloads.iteration import (attention_ops, decode_attention, logit_ops, prefill_attention,
                                 scale_op, scale_tokens, token_wise)
from workloads.parallel import Layout, replace
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

    def static_power_w(self) -> float:
        return (self.design or self.system).static_power_w()

    def cost_usd(self) -> float:
        phys = (self.design or self.system).physical()
        return float(phys.cost_usd) if phys is not None else float("nan")

    def share(self, w: ir.Workload) -> ir.Workload:
        """One device's part of ``w`` (``w`` itself on a single design)."""
        if self.system is None:
            return w
        from workloads.parallel import parallelize
        return parallelize(w, self.layout).graphs[0]

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

    def __init__(self, base: ir.Workload, target: Target, max_tokens: int):
        if target.system is not None and (target.layout.pp > 1 or target.layout.dp > 1):
            raise BadInput("parallel", target.layout.to_dict(), "expected pp = 1 and dp = 1 "
                           "for serving (tensor or expert parallelism within one replica)")
        self.base, self.target, self.max_tokens = base, target, int(max_tokens)
        self.static_w = target.static_power_w()
        self.grid = np.array(token_grid(self.max_tokens), dtype=float)
        lat, dyn = [], []
        body = token_wise(base)
        for t in self.grid:
            w = scale_tokens(body, int(t))
            latency, energy = target.run(w)
            lat.append(latency)
            dyn.append(energy - self.static_w * latency)
        self.g_latency = np.array(lat)
        self.g_energy = np.array(dyn)
        # the attention ops of one device, grouped by what they compute
        share = target.share(base)
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
        self.device = target.device
        # dense memory of one device: weights, one token's KV (every layer), activations
        self.weights_bytes = float(memory_footprint(share).weights_bytes)
        self.kv_bytes_per_token = float(sum(
            int(op.attrs.get("kv_heads", op.attrs["heads"])) * ir.kv_row_elements(op.attrs)
            * op.bytes_per_element for op in attention_ops(share)))
        self.activation_bytes = float(memory_footprint(
            target.share(scale_tokens(base, self.max_tokens))).activation_bytes)

    # -------------------------------------------------------------------------- memory
    def kv_capacity_tokens(self, memory_utilization: float = MEMORY_UTILIZATION) -> int:
        """Tokens of KV cache one replica holds: a device's memory x ``memory_utilization``
        less its weights and the largest iteration's activations, over one token's KV bytes
        on that device; :class:`InfeasibleDesign` when nothing is left."""
        cap = self.device.memory_capacity_bytes()
        if cap is None:
            raise InfeasibleDesign(f"{self.device.name} models no memory capacity: its KV "
                                   "cache cannot be sized")
        free = cap * memory_utilization - self.weights_bytes - self.activation_bytes
        tokens = int(free // self.kv_bytes_per_token) if self.kv_bytes_per_token else 0
        if tokens < 1:
            raise InfeasibleDesign(
                f"{self.base.model} does not fit for serving: weights {self.weights_bytes / 1e9:.3g}"
                f" GB + activations {self.activation_bytes / 1e9:.3g} GB leave no KV cache in "
                f"{memory_utilization:g} x {cap / 1e9:.3g} GB")
        return tokens

    # ---------------------------------------------------------------------------- cost
    def _g(self, tokens: int) -> tuple[float, float]:
        if tokens > self.max_tokens:
            raise BadInput("iteration tokens", tokens, f"expected at most {self.max_tokens}")
        if tokens < 1:
            return 0.0, 0.0
        return (float(np.interp(tokens, self.grid, self.g_latency)),
                float(np.interp(tokens, self.grid, self.g_energy)))

    def cost(self, decodes: int, decode_kv_tokens: int,
             chunks: Sequence[tuple[int, int]] = ()) -> tuple[float, float]:
        """(latency s, dynamic energy J) of an iteration of ``decodes`` decode tokens whose KV
        lengths (the new token included) sum to ``decode_kv_tokens``, and prefill ``chunks``
        ``(cached, new)``."""
        tokens = decodes + sum(c for _, c in chunks)
        lat, energy = self._g(tokens)
        dev = self.device
        seqs = decodes + len(chunks)
        hit = self._lm_cost.get(seqs)
        if hit is None:
            costs = [dev.cost(scale_op(op, seqs)) for op in self.lm_head]
            hit = self._lm_cost[seqs] = (
                sum(c.latency_s for c in costs),
                sum(c.total_energy_j for c in costs) * self.target.devices)
        lat += hit[0]
        energy += hit[1]
        mean = max(1, round(decode_kv_tokens / decodes)) if decodes else 0
        for (op, n), one in zip(self.attention, self._decode_one):
            if decodes:
                c = dev.cost(_decode_op(one, decodes, decode_kv_tokens, mean))
                lat += n * c.latency_s
                energy += n * c.total_energy_j * self.target.devices
            if chunks:
                c = dev.cost(prefill_attention(op, chunks))
                lat += n * c.latency_s
                energy += n * c.total_energy_j * self.target.devices
        return lat, energy


def _decode_op(one: ir.Op, decodes: int, kv_tokens: int, mean: int) -> ir.Op:
    """:func:`decode_attention` for ``decodes`` requests of ``kv_tokens`` KV tokens in all,
    without the per-request tuple (every template but npu_pim reads the mean), from ``one``:
    the op's :func:`decode_attention` for one request of one KV token."""
    a = one.attrs
    (_, h, _, d), (_, kvh, _, _), (_, _, _, dv) = one.input_shapes
    return replace(one, flops=one.flops * kv_tokens, kv_bytes_read=one.kv_bytes_read * kv_tokens,
                   activation_bytes_read=one.activation_bytes_read * decodes,
                   activation_bytes_written=one.activation_bytes_written * decodes,
                   input_shapes=((decodes, h, 1, d), (decodes, kvh, mean, d),
                                 (decodes, kvh, mean, dv)),
                   output_shapes=((decodes, h, 1, dv),),
                   attrs={**{k: v for k, v in a.items() if k != KV_LENS}, "batch": decodes,
                          "kv_len": mean, "causal_flops": one.flops * kv_tokens})
