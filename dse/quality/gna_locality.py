"""An example *user-given* quality function of a GNA window, for studies such as
``studies/gna_dit.yaml``::

    quality: {python: "dse.quality.gna_locality:attention_mass_retained"}

It is not a measured model quality: no checkpoint or data set is run. It scores a window by the
share of attention it keeps under a stated prior: attention weight decaying with distance as
``exp(-|dq - dk| / L)`` on every grid axis, ``L = LOCALITY_FRACTION x`` the axis length, and
all of it kept by dense attention (keys up to the query on a causal axis). The score of a
pattern is that share averaged over the queries, in (0, 1], 1.0 for dense attention; a larger
window keeps more, a larger stride shifts windows off-centre and keeps less, dilation keeps
the far keys of the query's group only. The prior and the product over axes are assumptions of
this example: replace the function by one measured on your model (e.g. the attention mass of
a real checkpoint's maps, or a quality metric of generated samples per window), with the same
signature: ``function(arch: dict) -> float``, higher is better.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from workloads.gna import GNAConfig, axis_window

#: Decay length of the attention prior as a fraction of each axis [E: an assumption of this
#: example, not a measurement].
LOCALITY_FRACTION = 0.125

_KEYS = ("grid", "window", "stride", "dilation", "causal", "layout", "tile", "q_tile")


def attention_mass_retained(arch: Mapping[str, Any]) -> float:
    """Share of the prior's attention mass the GNA pattern of ``arch`` keeps (module
    docstring); 1.0 when ``arch["attention"] == "dense"``."""
    if arch.get("attention", "gna") == "dense":
        return 1.0
    cfg = GNAConfig.from_mapping({k: arch[k] for k in _KEYS if k in arch}, prefix="arch.")
    share = 1.0
    for n, w, s, d, causal in zip(cfg.grid, cfg.window, cfg.stride, cfg.dilation, cfg.causal):
        share *= _axis_share(n, w, s, d, causal, math.exp(-1.0 / (LOCALITY_FRACTION * n)))
    return float(share)


def _axis_share(n: int, w: int, s: int, d: int, causal: bool, rho: float) -> float:
    """Mean over one axis's queries of the prior mass of the attended keys over the mass of
    all keys (up to the query when causal)."""
    x = np.arange(n)
    total = _geometric(x, np.zeros(n, dtype=np.int64), x if causal else np.full(n, n - 1), rho)
    kept = np.zeros(n)
    for g in range(d):
        lo, hi = axis_window(len(range(g, n, d)), w, s, causal)
        queries = np.arange(g, n, d)
        # keys g + d c for c in [lo, hi): distance d |c - c_q| in group coordinates
        kept[queries] = _geometric(queries // d, lo, hi - 1, rho ** d)
    return float(np.mean(kept / total))


def _geometric(c0: np.ndarray, a: np.ndarray, b: np.ndarray, rho: float) -> np.ndarray:
    """``sum_{c=a}^{b} rho^|c - c0|`` elementwise (0 where ``a > b``)."""
    def series(p, q):   # sum_{t=p}^{q} rho^t, 0 where p > q
        return np.where(p <= q, (rho ** p - rho ** (q + 1)) / (1.0 - rho), 0.0)
    left = series(c0 - np.minimum(b, c0), c0 - a)            # c <= c0
    right = series(np.maximum(a, c0 + 1) - c0, b - c0)      # c > c0
    return np.where(a <= b, left + np.where(b > c0, right, 0.0), 0.0)
