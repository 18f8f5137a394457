"""Upper bounds on architecture integers (zoo ``--arch`` values, Hugging Face config fields),
so a typo (``n_layer=1000000``) is refused at once instead of captured for hours.

Capture time grows with the number of ops (layers x ops per layer): GPT-2 with 256 layers
captures in 16 s on the 2-core development machine (`dse workload gpt2 --arch n_layer=256`),
and the deepest published LLMs have about 128 [E]. Widths cost nothing on meta tensors but every
template's cost does arithmetic on them: 2**20 keeps a product of two widths (vocabulary x
model width) far from int64 [E]. Positions (context lengths) up to 2**31 (Llama 4 Scout's
10M-token context is under it); ``workloads.moe.MAX_EXPERTS`` experts.
"""

from __future__ import annotations

import re

from workloads.moe import MAX_EXPERTS

MAX_LAYERS = 256
MAX_INT = 2 ** 20
MAX_POSITIONS = 2 ** 31

_LAYERS = re.compile(r"(^|_)(layers?|depths?|blocks?|n_layer)($|_)")
_EXPERTS = re.compile(r"experts?($|_)")
_POSITIONS = re.compile(r"(^|_)(positions?|position_embeddings|max_seq|seq|context|ctx)($|_)")


def int_limit(key: str) -> int:
    """The largest value an architecture integer named ``key`` may take."""
    key = key.lower()
    if _EXPERTS.search(key) and "per_tok" not in key:
        return MAX_EXPERTS
    if _LAYERS.search(key) and "size" not in key and "dim" not in key:
        return MAX_LAYERS
    if _POSITIONS.search(key):
        return MAX_POSITIONS
    return MAX_INT
