"""Request lists and request-length distributions for batched LLM decode.

A batched decode step serves requests with different context lengths. This module holds:

* :class:`Request` (input length, output length, tokens generated so far) and request lists;
* synthetic length distributions shaped like ShareGPT (mean 80 input / 296 output tokens) and
  Alpaca (12 / 56) [P NeuPIMs, ASPLOS 2024, Sec. 8.1; R casys-kaist/NeuPIMs trace-generator];
* :func:`steady_state_batch`: the requests a continuously batched server holds at a random
  moment (deterministic for a seed);
* :func:`batched_decode`: the decode-step workload of a request list: the serving layer's
  iteration graph (:mod:`workloads.iteration`) with each attention op carrying every request's
  KV length (attr ``kv_lens``), optionally the share of one device under tensor parallelism
  (:func:`shard_tensor_parallel`).

Attention ops of such workloads carry ``attrs["kv_lens"]`` (tuple, one KV length per batch item,
tokens, the new token included); ``attrs["kv_len"]`` is their rounded mean, and the op's
``kv_bytes_read`` and ``flops`` are the exact sums over requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import networkx as nx
import numpy as np

from dse.errors import BadInput
from workloads import formats, ir

#: Attention-op attribute: KV length of each batch item, tokens (tuple of ints).
KV_LENS = "kv_lens"


@dataclass(frozen=True)
class Request:
    """One inference request: ``input_len`` prompt tokens, ``output_len`` tokens to generate,
    ``generated`` of them done. Its KV cache holds ``context`` tokens before the next step."""

    input_len: int
    output_len: int
    generated: int = 0

    def __post_init__(self):
        if self.input_len < 1 or self.output_len < 1:
            raise BadInput("request", (self.input_len, self.output_len),
                           "expected input and output lengths >= 1 token")
        if not 0 <= self.generated < self.output_len:
            raise BadInput("request.generated", self.generated,
                           f"expected 0 <= generated < output_len = {self.output_len}")

    @property
    def context(self) -> int:
        """Tokens already in the KV cache, tokens."""
        return self.input_len + self.generated


def requests_from(pairs: Iterable[Sequence[int]]) -> list[Request]:
    """Requests from ``(input_len, output_len[, generated])`` tuples."""
    out = []
    for p in pairs:
        if not 2 <= len(p) <= 3:
            raise BadInput("requests", p, "expected (input_len, output_len[, generated])")
        out.append(Request(*(int(x) for x in p)))
    if not out:
        raise BadInput("requests", [], "expected at least one request")
    return out


@dataclass(frozen=True)
class LengthDistribution:
    """Input and output lengths, each log-normal with the given mean (tokens) and coefficient
    of variation ``cv`` (std / mean), clipped to [1, ``max_len``] tokens in total."""

    name: str
    mean_input: float
    mean_output: float
    cv: float = 1.0
    max_len: int = 2048

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` (input, output) length pairs, tokens."""
        sigma = math.sqrt(math.log1p(self.cv ** 2))

        def draw(mean: float) -> np.ndarray:
            mu = math.log(mean) - sigma ** 2 / 2          # E[lognormal] = exp(mu + s^2 / 2)
            return np.maximum(1, np.rint(rng.lognormal(mu, sigma, n))).astype(np.int64)

        ins = np.minimum(draw(self.mean_input), self.max_len - 1)
        outs = np.minimum(draw(self.mean_output), self.max_len - ins)
        return ins, np.maximum(outs, 1)


#: ShareGPT-like lengths: means 80 input / 296 output tokens [P NeuPIMs Sec. 8.1]; the shape
#: (log-normal, coefficient of variation 1, i.e. as spread as an exponential) is an estimate [E].
SHAREGPT = LengthDistribution("sharegpt", 80.0, 296.0)
#: Alpaca-like lengths: means 12 input / 56 output tokens [P NeuPIMs Sec. 8.1]; shape as above [E].
ALPACA = LengthDistribution("alpaca", 12.0, 56.0)
#: Chatbot-Arena-like lengths (Mélange's short-context "Arena" dataset): means 69.5 tokens per
#: prompt and 214.5 per response [P Zheng et al., LMSYS-Chat-1M, ICLR 2024, Table 1, check];
#: coefficient of variation 1.5, between the table's spreads (prompts ~2, responses ~1.3) [E];
#: Llama 2's 4,096-token context.
ARENA = LengthDistribution("arena", 69.5, 214.5, cv=1.5, max_len=4096)
@dataclass(frozen=True)
class TruncatedPrompts(LengthDistribution):
    """As :class:`LengthDistribution`, but a request longer than ``max_len`` loses prompt
    tokens, not output tokens (a document cut to fit the context beside its summary)."""

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        ins, outs = LengthDistribution(self.name, self.mean_input, self.mean_output, self.cv,
                                       1 << 40).sample(n, rng)
        outs = np.minimum(outs, self.max_len // 2)
        return np.maximum(1, np.minimum(ins, self.max_len - outs)), outs


#: PubMed-summarisation-like lengths (Mélange's long-context dataset): articles of 3,016 words
#: and abstracts of 203 words on average [P Cohan et al., NAACL 2018, Table 1, check] at 1.3
#: Llama tokens per word [E]: means 3,921 / 264 tokens, spread cv 0.5 [E]; articles cut to fit
#: Llama 2's 4,096-token context beside their summary.
PUBMED = TruncatedPrompts("pubmed", 3921.0, 264.0, cv=0.5, max_len=4096)


@dataclass(frozen=True)
class MixedLengths:
    """Lengths drawn from several distributions: each request from ``parts[i]`` with
    probability ``weights[i]``."""

    name: str
    parts: tuple[LengthDistribution, ...]
    weights: tuple[float, ...]

    @property
    def mean_input(self) -> float:
        return sum(w * p.mean_input for p, w in zip(self.parts, self.weights))

    @property
    def mean_output(self) -> float:
        return sum(w * p.mean_output for p, w in zip(self.parts, self.weights))

    def sample(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """``n`` (input, output) length pairs, tokens."""
        which = rng.choice(len(self.parts), size=n, p=np.asarray(self.weights) /
                           sum(self.weights))
        ins, outs = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
        for i, part in enumerate(self.parts):
            pick = which == i
            ins[pick], outs[pick] = part.sample(int(pick.sum()), rng)
        return ins, outs


#: Mélange's mixed-context dataset: 80 % Arena-like and 20 % PubMed-like requests [R
#: tyler-griggs/melange-release docs/images/Mixed_80_20_*.png, the blend's name; the blog
#: calls it "a synthetic blend of the two datasets"].
MIXED = MixedLengths("mixed", (ARENA, PUBMED), (0.8, 0.2))
DISTRIBUTIONS = {d.name: d for d in (SHAREGPT, ALPACA, ARENA, PUBMED, MIXED)}


def distribution(name: str) -> LengthDistribution | MixedLengths:
    try:
        return DISTRIBUTIONS[name]
    except KeyError:
        raise BadInput("distribution", name,
                       "expected one of " + ", ".join(DISTRIBUTIONS)) from None


def steady_state_batch(dist: LengthDistribution | str, batch: int, seed: int = 0,
                       pool: int | None = None) -> list[Request]:
    """The ``batch`` requests a continuously batched server holds at a random moment.

    Each of ``batch`` slots serves requests back to back, one token per step, and takes a new
    request from ``dist`` when one finishes. At a random moment in steady state (renewal
    theory) a slot holds a request with probability proportional to its output length, and
    the request is uniformly far through its generation. We draw a pool of requests, pick
    ``batch`` of them with that length bias and a uniform progress each. Deterministic for a
    seed; O(pool) work.
    """
    dist = distribution(dist) if isinstance(dist, str) else dist
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise BadInput("batch", batch, "expected a positive int")
    rng = np.random.default_rng(seed)
    n = pool or max(64 * batch, 4096)
    ins, outs = dist.sample(n, rng)
    pick = rng.choice(n, size=batch, replace=True, p=outs / outs.sum())
    progress = np.floor(rng.random(batch) * outs[pick]).astype(np.int64)
    return [Request(int(ins[i]), int(outs[i]), int(g)) for i, g in zip(pick, progress)]


def kv_lengths(requests: Sequence[Request]) -> list[int]:
    """KV length each request's next decode step attends over (context + the new token)."""
    return [r.context + 1 for r in requests]


# ---------------------------------------------------------------------------------- workloads
def rebuild(w: ir.Workload, ops: dict[str, ir.Op], **fields) -> ir.Workload:
    """A copy of ``w`` whose nodes named in ``ops`` carry those ops (same names and edges),
    with ``fields`` (workload attributes) replaced."""
    g = nx.DiGraph()
    for n, data in w.graph.nodes(data=True):
        g.add_node(n, **{**data, "op": ops.get(n, data["op"])})
    g.add_edges_from(w.graph.edges(data=True))
    out = ir.Workload(graph=g, model=w.model, phase=w.phase, dtype=w.dtype, batch=w.batch,
                      seq=w.seq, context=w.context, arch=dict(w.arch), params=w.params,
                      unknown_targets=dict(w.unknown_targets))
    for k, v in fields.items():
        setattr(out, k, v)
    return out


def attention_kv_lens(op: ir.Op) -> tuple[int, ...]:
    """KV length of every batch item of an attention op (uniform when not given)."""
    lens = op.attrs.get(KV_LENS)
    if lens:
        return tuple(int(x) for x in lens)
    return (int(op.attrs.get("kv_len", 0)),) * int(op.attrs.get("batch", 1) or 1)


def with_kv_lengths(w: ir.Workload, kv_lens: Sequence[int]) -> ir.Workload:
    """``w`` (a decode step of ``len(kv_lens)`` requests) with each attention op's KV traffic
    and FLOPs recomputed for per-request KV lengths ``kv_lens`` (tokens)."""
    kv_lens = tuple(int(x) for x in kv_lens)
    if w.phase != "decode":
        raise BadInput("phase", w.phase, "per-request KV lengths apply to decode steps")
    if len(kv_lens) != w.batch or min(kv_lens, default=0) < 1:
        raise BadInput("kv_lens", len(kv_lens), f"expected {w.batch} lengths >= 1")
    total = sum(kv_lens)
    ops = {}
    for n in w.graph.nodes:
        op = w.graph.nodes[n]["op"]
        if op.kind != ir.ATTENTION:
            continue
        a = op.attrs
        heads, kv_heads = int(a["heads"]), int(a.get("kv_heads", a["heads"]))
        d, dv, sq = int(a["head_dim"]), int(a.get("value_dim", a["head_dim"])), int(a["q_len"])
        kv_bytes = formats.kv_bytes(op, total * kv_heads * ir.kv_row_elements(a), d)
        flops = 2 * sq * heads * (d + dv) * total
        ops[n] = replace(op, kv_bytes_read=kv_bytes, flops=flops,
                         attrs={**a, KV_LENS: kv_lens, "kv_len": round(total / len(kv_lens)),
                                "causal_flops": flops})
    return rebuild(w, ops, context=round(total / len(kv_lens)) - 1)


def _feeds_from_attention(w: ir.Workload, name: str) -> bool:
    return any(w.graph.nodes[p]["op"].kind == ir.ATTENTION for p in w.graph.predecessors(name))


def shard_tensor_parallel(w: ir.Workload, tp: int) -> ir.Workload:
    """The share of one of ``tp`` devices under Megatron-style tensor parallelism.

    Matmuls fed by attention or with a reduction wider than ``d_model`` (attention output and
    FFN down projections) split their reduction (row parallel); the others split their outputs
    (column parallel, the LM head over the vocabulary). Attention keeps ``heads / tp`` heads
    and their KV cache; the FFN activation splits; embeddings, norms and residual adds are
    replicated. The all-reduces between devices are not modelled (the same for every design
    compared on the shard).
    """
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise BadInput("tensor_parallel", tp, "expected a positive int")
    if tp == 1:
        return w
    d_model = int(w.arch.get("d_model", 0))
    heads = int(w.arch.get("n_head", 0))
    if not d_model or heads % tp:
        raise BadInput("tensor_parallel", tp, f"expected a divisor of the {heads} heads of "
                       f"{w.model} (with d_model known)")
    ops: dict[str, ir.Op] = {}
    for n in w.graph.nodes:
        op = w.graph.nodes[n]["op"]
        a = op.attrs
        if op.kind == ir.MATMUL and a.get("weight_operand"):
            m, nn, k = int(a["m"]), int(a["n"]), int(a["k"])
            if _feeds_from_attention(w, n) or k > d_model:
                if k % tp:
                    raise BadInput("tensor_parallel", tp, f"{n}: reduction {k} not divisible")
                ops[n] = replace(op, flops=op.flops // tp, weight_bytes=op.weight_bytes // tp,
                                 activation_bytes_read=op.activation_bytes_read // tp,
                                 attrs={**a, "k": k // tp, "tp_split": "row"})
            else:
                ops[n] = replace(op, flops=op.flops // tp, weight_bytes=op.weight_bytes // tp,
                                 activation_bytes_written=op.activation_bytes_written // tp,
                                 attrs={**a, "n": math.ceil(nn / tp), "tp_split": "column"})
        elif op.kind == ir.ATTENTION:
            kvh = int(a.get("kv_heads", a["heads"]))
            ops[n] = replace(op, flops=op.flops // tp, kv_bytes_read=op.kv_bytes_read // tp,
                             activation_bytes_read=op.activation_bytes_read // tp,
                             activation_bytes_written=op.activation_bytes_written // tp,
                             attrs={**a, "heads": int(a["heads"]) // tp,
                                    "kv_heads": max(1, kvh // tp),
                                    "causal_flops": int(a.get("causal_flops", op.flops)) // tp})
        elif a.get("kv_append") or (op.kind in (ir.ELEMENTWISE, ir.DATA_MOVEMENT)
                                    and a.get("elements", 0) > w.batch * max(w.seq, 1) * d_model):
            ops[n] = replace(op, flops=op.flops // tp, kv_bytes_written=op.kv_bytes_written // tp,
                             activation_bytes_read=op.activation_bytes_read // tp,
                             activation_bytes_written=op.activation_bytes_written // tp,
                             attrs={**a, "elements": a.get("elements", 0) // tp})
    return rebuild(w, ops, params=w.params // tp)


def batched_decode(model: str, requests: Sequence[Request], dtype: str = "bf16",
                   arch: dict | None = None, tensor_parallel: int = 1) -> ir.Workload:
    """The decode step serving ``requests`` (one new token each) of zoo ``model``: the serving
    layer's iteration graph (:func:`workloads.iteration.iteration_workload`, built from the
    captured step of batch 1) with every attention op given the per-request KV lengths; with
    ``tensor_parallel`` > 1, the share of one device."""
    from workloads.build import build_workload   # the capture needs torch; import lazily
    from workloads.iteration import iteration_workload

    if not requests:
        raise BadInput("requests", [], "expected at least one request")
    lens = kv_lengths(requests)
    base = build_workload(model, phase="decode", batch=1, context=1, dtype=dtype, arch=arch)
    w = iteration_workload(base, lens)
    w.context = max(1, round(sum(lens) / len(lens)) - 1)
    return shard_tensor_parallel(w, tensor_parallel)


def split_batch(w: ir.Workload, groups: Sequence[Sequence[int]]) -> ir.Workload:
    """One graph running ``w``'s step for each group of batch items separately (sub-batches):
    every op copied per group (names suffixed ``@sb<i>``), sizes scaled to the group, weights
    read by each copy, attention ops keeping their group's KV lengths (and any per-item attr
    listed in ``attrs["per_item"]``). The copies share no edges, so a simulator may overlap
    them."""
    groups = [list(gr) for gr in groups if len(gr)]
    B = w.batch
    if not groups or sorted(i for gr in groups for i in gr) != list(range(B)):
        raise BadInput("sub-batches", [len(g) for g in groups],
                       f"expected a partition of the {B} batch items")
    g = nx.DiGraph()
    index = 0
    order = w.ops
    for si, items in enumerate(groups):
        f = len(items) / B
        names = {op.name: f"{op.name}@sb{si}" for op in order}
        for op in order:
            g.add_node(names[op.name], op=_scale_op(op, items, f, B, names[op.name]), index=index)
            index += 1
        for u, v, data in w.graph.edges(data=True):
            g.add_edge(names[u], names[v], bytes=int(round(data.get("bytes", 0) * f)))
    out = ir.Workload(graph=g, model=w.model, phase=w.phase, dtype=w.dtype, batch=B, seq=w.seq,
                      context=w.context, arch=dict(w.arch),
                      params=w.params, unknown_targets=dict(w.unknown_targets))
    return out


def _scale_op(op: ir.Op, items: list[int], f: float, batch: int, name: str) -> ir.Op:
    """``op`` restricted to batch items ``items`` (a fraction ``f`` of ``batch``)."""
    a = dict(op.attrs)
    s = lambda x: int(round(x * f))
    if op.kind == ir.ATTENTION:
        lens = attention_kv_lens(op)
        sub = tuple(lens[i] for i in items) if len(lens) == batch else lens
        per_item = {k: tuple(a[k][i] for i in items) for k in a.get("per_item", ())
                    if isinstance(a.get(k), (tuple, list)) and len(a[k]) == batch}
        share = sum(sub) / max(sum(lens), 1)
        a.update(per_item, batch=len(items), **{KV_LENS: sub})
        a["kv_len"] = round(sum(sub) / len(sub))
        if "causal_flops" in a:
            a["causal_flops"] = int(round(a["causal_flops"] * share))
        return replace(op, name=name, flops=int(round(op.flops * share)),
                       kv_bytes_read=int(round(op.kv_bytes_read * share)),
                       activation_bytes_read=s(op.activation_bytes_read),
                       activation_bytes_written=s(op.activation_bytes_written), attrs=a)
    weight = op.weight_bytes
    if op.kind == ir.MATMUL:
        if a.get("weight_operand") and "m" in a:
            a["m"] = max(1, s(a["m"]))
        elif "batch" in a:
            a["batch"] = max(1, s(a["batch"]))
    elif op.kind == ir.EMBEDDING and op.activation_bytes_read:
        weight = s(weight)            # rows gathered per token
    if "elements" in a:
        a["elements"] = max(1, s(a["elements"]))
    flops = s(op.flops)
    if op.kind == ir.MOE:   # the group's tokens touch their own experts: route them again
        from workloads.moe import with_tokens
        a, flops, weight = with_tokens(a, max(1, s(a["tokens"])), op.bytes_per_element,
                                       op.weight_bytes)
    return replace(op, name=name, flops=flops, weight_bytes=weight,
                   activation_bytes_read=s(op.activation_bytes_read),
                   activation_bytes_written=s(op.activation_bytes_written),
                   kv_bytes_read=s(op.kv_bytes_read), kv_bytes_written=s(op.kv_bytes_written),
                   attrs=a)
