"""Upper bounds on architecture integers, so a typo (``n_layer=1000000``) is refused at once
instead of captured for hours.

Capture time grows with the number of ops (layers x ops per layer); widths cost nothing on meta
tensors but every template's cost does arithmetic on them. The bounds are far above any
published model [E]: 1024 layers (GPT-3 175B has 96, the deepest public LLMs ~ 128);
``workloads.moe.MAX_EXPERTS`` experts; 2**24 for any other integer (widths, vocabularies,
positions: Llama 4 Scout's 10M-token context is under it).
"""

from __future__ import annotations

import re

from workloads.moe import MAX_EXPERTS

MAX_LAYERS = 1024
MAX_INT = 2 ** 24

_LAYERS = re.compile(r"(^|_)(layers?|depths?|blocks?|n_layer)($|_)")
_EXPERTS = re.compile(r"experts?($|_)")


def int_limit(key: str) -> int:
    """The largest value an architecture integer named ``key`` may take."""
    key = key.lower()
    if _EXPERTS.search(key) and "per_tok" not in key:
        return MAX_EXPERTS
    if _LAYERS.search(key) and "size" not in key and "dim" not in key:
        return MAX_LAYERS
    return MAX_INT
