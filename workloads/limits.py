"""Upper bounds on architecture integers (zoo ``--arch`` values, Hugging Face config fields),
so a typo (``n_layer=1000000``) is refused at once instead of captured for hours.

Each bound is the largest published value of its kind with headroom (the shipped published
configs in ``tests/data/hf/published/`` all load at full depth under them; the test that loads
them is ``tests/test_hf_published.py``), and a key's kind is read from what it counts, never
from a word it merely contains (``shared_expert_intermediate_size`` is a width, not a count of
experts):

* **layers** — 256: the deepest published decoders have 126 (Llama-3.1-405B [R
  meta-llama/Llama-3.1-405B config.json]), and capture time grows with the op count (GPT-2 with
  256 layers captures in 16 s on the 2-core development machine [E]).
* **experts** (a count of experts, routed or shared) — :data:`workloads.moe.MAX_EXPERTS`.
* **positions** (context lengths) — 2**31: Llama-4 Scout's 10M-token context is under it [R
  meta-llama/Llama-4-Scout-17B-16E config.json].
* **widths** and everything else — 2**28: the widest published sizes are the 20,000,000-row
  n-gram hash table of Qwen4-exp (``ngram_vocab_size_base``, its config's default in
  transformers 5.24), vocabularies of 262,144 (Gemma 3 [R google/gemma-3-27b-it config.json])
  and FFNs of 53,248 (Llama-3.1-405B); 2**28 keeps a product of two widths (2**56) far from
  int64 [E].
"""

from __future__ import annotations

import functools
import re

from workloads.moe import MAX_EXPERTS

MAX_LAYERS = 256
MAX_INT = 2 ** 28
MAX_POSITIONS = 2 ** 31

#: A width, not a count: ``hidden_size``, ``moe_intermediate_size``, ``head_dim``, ``kv_lora_rank``,
#: ``vocab_size_per_layer_input``.
_WIDTH = re.compile(r"(^|_)(size|dim|dims|rank|width|channels|features)($|_)")
_LAYERS = re.compile(r"(^|_)(layers?|depths?|blocks?|n_layer)($|_)")
#: A count of experts: ``num_experts``, ``n_routed_experts``, ``num_local_experts``,
#: ``moe_num_experts``, ``n_shared_experts``, ``num_experts_per_tok`` (a count too).
_EXPERTS = re.compile(r"(^|_)experts?($|_per_tok(en)?$)")
_POSITIONS = re.compile(r"(^|_)(positions?|position_embeddings|max_seq|seq|context|ctx)($|_)")


@functools.lru_cache(maxsize=4096)
def int_limit(key: str) -> int:
    """The largest value an architecture integer named ``key`` may take."""
    key = key.lower()
    if _WIDTH.search(key):
        return MAX_INT
    if _EXPERTS.search(key):
        return MAX_EXPERTS
    if _LAYERS.search(key):
        return MAX_LAYERS
    if _POSITIONS.search(key):
        return MAX_POSITIONS
    return MAX_INT
