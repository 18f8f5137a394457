"""Chinchilla scaling-law loss of a language model from its parameters and training tokens.

``L(N, D) = E + A / N**alpha + B / D**beta`` (nats per token), the parametric fit of Hoffmann
et al., "Training Compute-Optimal Large Language Models", NeurIPS 2022 (arXiv:2203.15556),
Section 3.3 ("Approach 3"), eq. (10). ``N`` counts all parameters (embeddings included, as that
paper does; Kaplan et al. 2020 counted non-embedding parameters only).
"""

from __future__ import annotations

import math

from dse.errors import BadInput

#: Irreducible loss of natural text, nats/token [P Hoffmann et al. 2022, eq. 10].
E_NATS = 1.69
#: Parameter-term coefficient, nats/token x params**alpha [P same, eq. 10].
A_NATS = 406.4
#: Data-term coefficient, nats/token x tokens**beta [P same, eq. 10].
B_NATS = 410.7
#: Parameter exponent (dimensionless) [P same, eq. 10].
ALPHA = 0.34
#: Data exponent (dimensionless) [P same, eq. 10].
BETA = 0.28
#: Compute-optimal training tokens per parameter, tokens/param: Chinchilla itself, 70B
#: parameters on 1.4T tokens [P Hoffmann et al. 2022, Table 1 / Section 4.1].
TOKENS_PER_PARAM = 20.0


def loss_nats(params: float, tokens: float) -> float:
    """Predicted final pre-training loss, nats/token, of ``params`` parameters trained on
    ``tokens`` tokens."""
    for name, v in (("params", params), ("tokens", tokens)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise BadInput(f"quality.{name}", v, "expected a positive finite number")
    return E_NATS + A_NATS / params ** ALPHA + B_NATS / tokens ** BETA
