"""Mixture-of-experts routing statistics: which experts a batch touches, how many tokens each
expert processes, and what a template costs the routed experts as.

The capture sees no routing decisions (it runs on meta tensors), so the routed experts of a
layer are one ``moe`` op whose token counts come from a *load distribution* ``p`` over the
``E`` experts (``sum(p) == 1``; ``p_i`` is expert ``i``'s share of the routed assignments):

* Each of ``T`` tokens picks ``k`` distinct experts; token ``t`` picks expert ``i`` with
  probability ``pi_i = min(1, k * p_i)`` (exactly ``k / E`` under a uniform load). The number
  of tokens routed to expert ``i`` is ``N_i ~ Binomial(T, pi_i)``, its mean ``T * pi_i``.
* **Experts touched** (whose weights must be read): expert ``i`` is idle with probability
  ``(1 - pi_i)^T``, so ``E[distinct experts] = sum_i 1 - (1 - pi_i)^T`` — uniform:
  ``E * (1 - (1 - k/E)^T)``. One token reads ``k`` experts; ``T >> E / k`` tokens read all.
  The op's weight bytes are this expectation times the bytes of one expert.
* **Capacity factor** ``c_f`` (GShard / Switch Transformer [P Lepikhin et al. 2020; Fedus et
  al. 2021]): each expert processes at most ``C = ceil(c_f * T * k / E)`` tokens and drops the
  rest, so it processes ``E[min(N_i, C)] = sum_{j<C} P(N_i > j)`` tokens; ``c_f = 0`` is
  dropless (Mixtral, DeepSeek, Qwen MoE): every routed token is processed.
* **Load imbalance** ``r`` = the hottest expert's share over the mean share, ``E * max(p)``;
  ``r = 1`` is uniform, ``1 < r < E`` a Zipf load ``p_i ~ i^-s`` with ``s`` solved so that
  ``E * p_1 = r`` (any explicit distribution may be given instead).

FLOPs are ``2 * (processed assignments) * sum over GEMMs of n * k`` (2 per MAC): the GEMM work of
the experts, as torch's ``FlopCounterMode`` counts an eager per-expert loop (it does not count
the grouped op itself). Templates cost the op as its :func:`parts`: for each expert, with
probability ``1 - (1 - pi_i)^T`` it runs its GEMMs on its expected tokens given it is touched,
``m_i = E[min(N_i, C)] / (1 - (1 - pi_i)^T)``, split between ``floor(m_i)`` and ``ceil(m_i)``
so the expected tokens are exact; experts with equal counts are costed once.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from dse.errors import BadInput
from workloads import ir

#: Most experts a layer may have (a capture or a search refuses more): 4x the most a
#: config transformers ships has, Doge's 16,384 fine-grained experts (``DogeConfig``'s default;
#: published Doge MoE checkpoints have 1,024 [R SmallDoge/Doge-20M-MoE-Instruct config.json];
#: DeepSeek-V3 has 256, Qwen3-Next 512).
MAX_EXPERTS = 65536


def load_distribution(experts: int, imbalance: float | Sequence[float] = 1.0) -> np.ndarray:
    """Share of the routed assignments of each expert, hottest first (sums to 1).

    ``imbalance`` is the hottest expert's share over the mean (1 = uniform; a Zipf load up to
    ``experts``), or an explicit sequence of ``experts`` non-negative weights.
    """
    if isinstance(imbalance, (list, tuple, np.ndarray)):
        w = np.asarray(imbalance, dtype=np.float64)
        if w.shape != (experts,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
            raise BadInput("expert_load", list(imbalance)[:8],
                           f"expected {experts} non-negative weights with a positive sum")
        return w / w.sum()
    r = float(imbalance)
    if not math.isfinite(r) or r < 1.0 or (r >= experts and experts > 1):
        raise BadInput("expert_imbalance", imbalance,
                       f"expected a number in [1, {experts}) (hottest expert's load over the mean)")
    ranks = np.arange(1, experts + 1, dtype=np.float64)
    if r == 1.0 or experts == 1:
        return np.full(experts, 1.0 / experts)

    def hottest_over_mean(s: float) -> float:
        w = ranks ** -s
        return experts * w[0] / w.sum()
    lo, hi = 0.0, 1.0
    while hottest_over_mean(hi) < r:
        hi *= 2.0
    for _ in range(100):   # bisection: hottest_over_mean rises monotonically with s
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if hottest_over_mean(mid) < r else (lo, mid)
    w = ranks ** -(0.5 * (lo + hi))
    return w / w.sum()


def routing(tokens: int, top_k: int, experts: int, imbalance: float | Sequence[float] = 1.0,
            capacity_factor: float = 0.0) -> dict[str, Any]:
    """Expected routing of ``tokens`` tokens to ``top_k`` of ``experts`` experts (see the module
    docstring): per-expert processed tokens and touch probabilities, experts touched, capacity
    and dropped tokens."""
    if not 1 <= top_k <= experts <= MAX_EXPERTS:
        raise BadInput("top_k", top_k, f"expected 1 <= top_k <= experts ({experts}) <= {MAX_EXPERTS}")
    if not (math.isfinite(capacity_factor) and capacity_factor >= 0):
        raise BadInput("capacity_factor", capacity_factor, "expected a number >= 0 (0: dropless)")
    p = load_distribution(experts, imbalance)
    pick = np.minimum(1.0, top_k * p)                      # P(a token picks expert i)
    touched = -np.expm1(tokens * np.log1p(-np.minimum(pick, 1 - 1e-300)))
    touched[pick >= 1.0] = 1.0 if tokens > 0 else 0.0
    routed = tokens * pick                                 # E[N_i]
    capacity = math.ceil(capacity_factor * tokens * top_k / experts) if capacity_factor else 0
    if capacity:
        below = np.arange(capacity)                        # E[min(N, C)] = sum_{j<C} P(N > j)
        from scipy import stats    # here: importing scipy.stats costs a second at start-up
        processed = np.array([stats.binom.sf(below, tokens, q).sum() if q > 0 else 0.0
                              for q in pick])
    else:
        processed = routed
    return {"load": p, "pick": pick, "touched": touched, "tokens_per_expert": processed,
            "experts_touched": float(touched.sum()), "capacity": capacity,
            "dropped_tokens": float(routed.sum() - processed.sum())}


def moe_attrs(tokens: int, top_k: int | None, experts: int, gemms: list[tuple[int, int]],
              act_elements_per_token: int, params_per_expert: int, itemsize: int,
              imbalance: float | Sequence[float] = 1.0, capacity_factor: float = 0.0,
              ) -> tuple[dict[str, Any], int, int]:
    """Attrs, FLOPs and weight bytes of a ``moe`` op. ``top_k`` None: each of ``tokens`` rows
    is one assignment (a bare grouped matmul, whose routing the graph does not show)."""
    k = top_k or 1
    r = routing(tokens, k, experts, imbalance, capacity_factor)
    processed = r["tokens_per_expert"]
    macs_per_token = sum(n * kk for n, kk in gemms)
    flops = 2 * int(round(float(processed.sum()))) * macs_per_token
    weight_bytes = int(round(r["experts_touched"] * params_per_expert * itemsize))
    attrs = {
        "experts": experts, "top_k": top_k, "tokens": tokens, "gemms": [list(g) for g in gemms],
        "act_elements_per_token": act_elements_per_token,
        "tokens_per_expert": [float(x) for x in processed],
        "touch_probability": [float(x) for x in r["touched"]],
        "experts_touched": r["experts_touched"], "capacity_factor": float(capacity_factor),
        "capacity": r["capacity"], "dropped_tokens": r["dropped_tokens"],
        "imbalance": imbalance if isinstance(imbalance, (int, float)) else "explicit",
        "params_per_expert": params_per_expert, "weight_bytes_per_expert": params_per_expert * itemsize,
    }
    return attrs, flops, weight_bytes


def with_tokens(attrs: dict[str, Any], tokens: int, itemsize: int,
                weight_bytes: int | None = None) -> tuple[dict[str, Any], int, int]:
    """The attrs, FLOPs and weight bytes of a ``moe`` op (``attrs`` as :func:`moe_attrs` made
    them) routing ``tokens`` tokens instead: the same experts, GEMMs, load and capacity
    factor. An explicit load (``imbalance == "explicit"``) is recovered from the expected
    tokens per expert (exact when dropless). ``weight_bytes``: the op's weight bytes now;
    where number formats (:mod:`workloads.formats`) made them other than ``itemsize`` per
    parameter, the new ones keep the op's bytes per parameter."""
    imbalance = attrs.get("imbalance", 1.0)
    if not isinstance(imbalance, (int, float)):
        imbalance = [max(float(x), 0.0) for x in attrs["tokens_per_expert"]]
        if not sum(imbalance):
            imbalance = 1.0
    new, flops, weight = moe_attrs(
        tokens, attrs.get("top_k"), int(attrs["experts"]),
        [tuple(g) for g in attrs["gemms"]], int(attrs.get("act_elements_per_token", 0)),
        int(attrs["params_per_expert"]), itemsize, imbalance,
        float(attrs.get("capacity_factor", 0.0)))
    before = float(attrs["experts_touched"]) * int(attrs["params_per_expert"]) * itemsize
    if weight_bytes is not None and before > 0 and weight_bytes != int(round(before)):
        ratio = weight_bytes / before    # formats: bytes per parameter other than itemsize
        weight = int(round(weight * ratio))
        new["weight_bytes_per_expert"] = int(round(new["weight_bytes_per_expert"] * ratio))
    kept = {k: v for k, v in attrs.items() if k not in new}
    return {**kept, **new, "imbalance": attrs.get("imbalance", 1.0)}, flops, weight


def parts(op: ir.Op) -> list[tuple[float, ir.Op]]:
    from workloads.composite import make_part
    """What a template costs a ``moe`` op as: ``(expected count, op)`` pairs of per-expert
    matmuls (and the gated activation between them), then the weighted combine of the top-k
    outputs; see the module docstring."""
    a, b = op.attrs, op.bytes_per_element
    buckets: dict[int, float] = {}
    for tokens, touched in zip(a["tokens_per_expert"], a["touch_probability"]):
        if touched <= 0 or tokens <= 0:
            continue
        m = max(tokens / touched, 1.0)
        lo = math.floor(m)
        frac = m - lo
        buckets[lo] = buckets.get(lo, 0.0) + touched * (1.0 - frac)
        if frac > 0:
            buckets[lo + 1] = buckets.get(lo + 1, 0.0) + touched * frac
    out: list[tuple[float, ir.Op]] = []
    gemms = a["gemms"]
    for m, count in sorted(buckets.items()):
        if count <= 0:
            continue
        for g, (n, k) in enumerate(gemms):
            out.append((count, make_part(op, f"gemm{g}.m{m}", ir.MATMUL, flops=2 * m * n * k,
                                     weight=n * k * b, read=m * k * b, written=m * n * b,
                                     attrs={"m": m, "n": n, "k": k, "batch": 1,
                                            "weight_operand": True})))
            if g == 0 and len(gemms) > 1 and a.get("act_elements_per_token"):
                e = m * a["act_elements_per_token"]
                out.append((count, make_part(op, f"act.m{m}", ir.ELEMENTWISE, flops=e,
                                         read=m * n * b, written=e * b,
                                         attrs={"elements": e})))
    if a.get("top_k") and len(gemms) > 1:
        d = gemms[-1][0]
        e = a["tokens"] * d
        out.append((1.0, make_part(op, "combine", ir.ELEMENTWISE, flops=2 * e * a["top_k"],
                               read=e * a["top_k"] * b, written=e * b, attrs={"elements": e})))
    return out

