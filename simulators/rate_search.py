"""The highest arrival rate a server sustains under a criterion, by bracketing and bisection.

Capacity questions ("how many requests/s does one A100 serve within these SLOs?") are asked of
a simulator, not of a formula: :func:`max_rate` calls ``ok(rate)`` (serve a trace at that rate,
check its SLO attainment) at rates that bracket the answer (doubling or halving from a guess)
and then bisects in log space until the bracket is within ``rel_tol``. It assumes that a rate
that fails makes every higher rate fail (more load never helps); each call is one serving run,
so the answer costs about ``log2(range) + log2(1 / rel_tol)`` runs.
"""

from __future__ import annotations

import math
from typing import Callable

from dse.errors import BadInput

#: Relative width of the final bracket [E: 2 % is below the run-to-run noise of a few hundred
#: requests].
REL_TOL = 0.02


def max_rate(ok: Callable[[float], bool], guess: float, rel_tol: float = REL_TOL,
             low_limit: float = 1e-4, high_limit: float = 1e7) -> float:
    """The highest rate (requests/s, within ``rel_tol``) at which ``ok`` holds, searching from
    ``guess``; 0.0 when it fails even at ``low_limit``; ``high_limit`` when it never fails."""
    if not (isinstance(guess, (int, float)) and math.isfinite(guess) and guess > 0):
        raise BadInput("guess", guess, "expected a rate > 0, requests/s")
    guess = min(max(guess, low_limit), high_limit)
    if ok(guess):
        lo, hi = guess, None
        while hi is None:
            if lo >= high_limit:
                return high_limit
            nxt = min(lo * 2.0, high_limit)
            if ok(nxt):
                lo = nxt
            else:
                hi = nxt
    else:
        lo, hi = None, guess
        while lo is None:
            nxt = hi / 2.0
            if nxt < low_limit:
                return 0.0
            if ok(nxt):
                lo = nxt
            else:
                hi = nxt
    while hi / lo > 1.0 + rel_tol:
        mid = math.sqrt(lo * hi)
        if ok(mid):
            lo = mid
        else:
            hi = mid
    return lo
