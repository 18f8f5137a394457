"""Speculative decoding as an iteration shape: a draft proposes ``k`` tokens, the target
verifies them in one iteration of ``k + 1`` query tokens per sequence, and the accepted prefix
plus one token of the target's own is kept [P Leviathan et al., ICML 2023; P Chen et al., arXiv
2302.01318, 2023].

A round of a batch of ``B`` sequences costs

* **drafting**: ``k`` decode steps of the draft model for the ``B`` sequences (its own
  :class:`~simulators.iteration_cost.IterationCostModel`, on the target's device or another),
  or, for self-drafting heads (Medusa-style: ``k`` heads, each a ``d x d`` layer and an LM head
  on the target's last hidden state) [P Cai et al., Medusa, ICML 2024], one pass of the heads
  on the target's device;
* **verification**: the target's iteration with a chunk of ``k + 1`` tokens after each
  sequence's cached context (the cost model's prefill-chunk path: projections on ``B (k + 1)``
  tokens, attention of ``k + 1`` queries over the context), plus the LM head on all ``k + 1``
  positions (a plain iteration computes it for one);
* with ``overlap`` and the draft on its own device, drafting of the next round runs while the
  target verifies (Mirror-SD's parallel heterogeneous execution, taken as perfectly
  overlapped: a bound from the fast side) [P Bhendawade et al., Mirror Speculative Decoding,
  arXiv 2510.13161, 2025]: a round takes ``max(draft, verify)``, else their sum.

Acceptance: each drafted token is accepted with probability ``a`` independently until the first
rejection, so a round emits ``1 + (accepted prefix)`` tokens, ``(1 - a^(k+1)) / (1 - a)`` on
average (``k + 1`` when ``a = 1``); ``accepted_tokens`` (the mean tokens per round papers
report) gives ``a`` by inverting that. Rounds are drawn from a seeded generator per sequence
(deterministic), and a sequence never emits past its output length: every output token is
produced exactly once (tested). The baseline is the same batch decoded one token per step on
the target.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dse.errors import BadInput
from workloads import ir
from workloads.iteration import scale_op

#: Draft tokens per round at most [E: papers use 1-8; verification past 16 is prefill-like].
MAX_K = 16


def expected_tokens(a: float, k: int) -> float:
    """Mean tokens a round emits with per-token acceptance ``a`` and ``k`` drafted tokens."""
    return float(k + 1) if a >= 1.0 else (1.0 - a ** (k + 1)) / (1.0 - a)


def acceptance_for(tokens: float, k: int) -> float:
    """The per-token acceptance ``a`` whose :func:`expected_tokens` is ``tokens``."""
    if not 1.0 <= tokens <= k + 1:
        raise BadInput("accepted_tokens", tokens, f"expected mean tokens per round in [1, k + 1 = "
                       f"{k + 1}]")
    lo, hi = 0.0, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if expected_tokens(mid, k) < tokens:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def check_speculation(k: Any, acceptance: Any) -> tuple[int, float]:
    """``k`` and the per-token acceptance, or one :class:`BadInput` line."""
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= MAX_K:
        raise BadInput("k", k, f"expected draft tokens per round, an int in [1, {MAX_K}]")
    if isinstance(acceptance, bool) or not isinstance(acceptance, (int, float)) \
            or not 0.0 <= acceptance <= 1.0:
        raise BadInput("acceptance", acceptance, "expected a per-token acceptance rate in "
                       "[0, 1]")
    return int(k), float(acceptance)


def _linear(name: str, m: int, n: int, k: int, dtype: str) -> ir.Op:
    """A weight matmul of ``m`` tokens, ``n`` outputs, ``k`` inputs."""
    b = ir.DTYPE_BYTES[dtype]
    return ir.Op(name=name, kind=ir.MATMUL, target="linear", input_shapes=((1, m, k), (k, n)),
                 output_shapes=((1, m, n),), dtype=dtype, bytes_per_element=b,
                 flops=2 * m * n * k, weight_bytes=b * k * n, activation_bytes_read=b * m * k,
                 activation_bytes_written=b * m * n,
                 attrs={"m": m, "n": n, "k": k, "batch": 1, "weight_operand": True})


@dataclass
class SpeculativeResult:
    """A speculative generation of ``batch`` sequences of ``input_len`` prompt and
    ``output_len`` output tokens: TTFT, TPOT and end-to-end time with speculation and without
    (s), the speed-ups, rounds, tokens emitted per round (mean and expected), the mean round's
    drafting and verification time (s), and what ran where."""

    k: int
    acceptance: float
    expected_tokens_per_round: float
    tokens_per_round: float
    rounds: int
    output_tokens: int
    ttft_s: float
    tpot_s: float
    e2e_s: float
    baseline_tpot_s: float
    baseline_e2e_s: float
    speedup: float
    e2e_speedup: float
    draft_s: float
    verify_s: float
    round_s: float
    overlap: bool
    draft: dict[str, Any]
    target: dict[str, Any]
    batch: int
    input_len: int
    output_len: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Drafter:
    """What drafting one round costs: a draft model's ``k`` decode steps (``cost``: its
    iteration cost model), or ``heads`` self-drafting heads on the target (``cost`` None)."""

    def __init__(self, cost=None, heads_on=None, describe: dict[str, Any] | None = None):
        self.cost, self.heads_on = cost, heads_on
        self.describe = describe or {}

    def round_s(self, k: int, ctx: np.ndarray) -> float:
        """Drafting time of one round for sequences at contexts ``ctx`` (tokens), s."""
        b = len(ctx)
        if self.cost is not None:
            lens = self.cost.per_request
            return sum(self.cost.cost(b, int(ctx.sum()) + b * (j + 1),
                                      kv_lens=ctx + j + 1 if lens else None)[0]
                       for j in range(k))
        target = self.heads_on
        lm = target.lm_head[0]
        d, v = int(lm.attrs["k"]), int(lm.attrs["n"])
        dev = target.device
        one = (dev.cost(_linear("head_res", b, d, d, lm.dtype)).latency_s
               + dev.cost(_linear("head_lm", b, v, d, lm.dtype)).latency_s)
        return k * one


def lm_head_extra_s(target, sequences: int, tokens: int) -> float:
    """LM head time on ``tokens`` positions less on ``sequences`` (what a plain iteration
    prices), s."""
    dev = target.device
    return sum(dev.cost(scale_op(op, tokens)).latency_s - dev.cost(scale_op(op, sequences))
               .latency_s for op in target.lm_head)


def speculative_generate(target, drafter: Drafter, input_len: int, output_len: int,
                         batch: int = 1, k: int = 4, acceptance: float = 0.8,
                         overlap: bool = False, seed: int = 0) -> SpeculativeResult:
    """Generate ``output_len`` tokens for ``batch`` prompts of ``input_len`` tokens on the
    target's cost model ``target`` with speculation (see the module docstring), and without."""
    k, a = check_speculation(k, acceptance)
    for key, v in (("input_len", input_len), ("output_len", output_len), ("batch", batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise BadInput(key, v, "expected an int >= 1")
    if overlap and drafter.cost is None:
        raise BadInput("overlap", overlap, "expected a draft model on its own device to "
                       "overlap drafting with verification (heads run on the target)")
    rng = np.random.default_rng(seed)
    prefill = target.cost(0, 0, [(0, input_len)] * batch)[0]
    if drafter.cost is not None:
        d_prefill = drafter.cost.cost(0, 0, [(0, input_len)] * batch)[0]
        prefill = max(prefill, d_prefill) if overlap else prefill + d_prefill
    # baseline: one token per step
    ctx = input_len + 1
    base = 0.0
    for _ in range(output_len - 1):
        base += target.cost(batch, batch * ctx,
                            kv_lens=[ctx] * batch if target.per_request else None)[0]
        ctx += 1
    # speculation: sequences in lock step, each emitting its own accepted prefix + 1
    left = np.full(batch, output_len - 1, dtype=np.int64)
    ctx_s = np.full(batch, input_len + 1, dtype=np.int64)
    emitted, rounds, seq_rounds, spec, d_sum, v_sum = 0, 0, 0, 0.0, 0.0, 0.0
    while (left > 0).any():
        live = left > 0
        c = ctx_s[live]
        n = int(live.sum())
        draft = drafter.round_s(k, c)
        verify = (target.cost(0, 0, [(int(x), k + 1) for x in c])[0]
                  + lm_head_extra_s(target, n, n * (k + 1)))
        spec += max(draft, verify) if overlap else draft + verify
        d_sum += draft
        v_sum += verify
        rounds += 1
        seq_rounds += n
        ok = rng.random((n, k)) < a
        accepted = np.where(ok.all(axis=1), k, np.argmin(ok, axis=1))
        got = np.minimum(accepted + 1, left[live])
        left[live] -= got
        ctx_s[live] += got
        emitted += int(got.sum())
    if emitted != batch * (output_len - 1):      # every token once (conservation)
        raise RuntimeError(f"emitted {emitted} tokens, expected {batch * (output_len - 1)}")
    steps = max(output_len - 1, 1)
    tpot = spec / steps
    base_tpot = base / steps
    return SpeculativeResult(
        k=k, acceptance=a, expected_tokens_per_round=expected_tokens(a, k),
        tokens_per_round=emitted / seq_rounds if seq_rounds else 0.0,
        rounds=rounds, output_tokens=emitted + batch, ttft_s=prefill, tpot_s=tpot,
        e2e_s=prefill + spec, baseline_tpot_s=base_tpot, baseline_e2e_s=prefill + base,
        speedup=base / spec if spec > 0 else 1.0,
        e2e_speedup=(prefill + base) / (prefill + spec),
        draft_s=d_sum / max(rounds, 1), verify_s=v_sum / max(rounds, 1),
        round_s=spec / max(rounds, 1), overlap=overlap, draft=drafter.describe,
        target=target.target.describe(), batch=batch, input_len=input_len,
        output_len=output_len)
