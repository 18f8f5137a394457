"""Single-operator micro workloads: one GEMM, one convolution, one attention.

``batch`` multiplies the leading dimension: ``linear`` takes [batch * m, k]; ``conv2d``
[batch * n, c, h, w]; ``sdpa`` q [batch * b, h, sq, d] with k, v [batch * b, kv_heads, skv, d].
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from dse.errors import BadInput
from workloads.zoo.definitions.checks import check_count, check_phase, example_floats
from workloads.zoo.registry import ModelSpec, SizeRule, register


class Linear(nn.Module):
    """y = x W^T (+ b): [m, k] x [k, n]."""

    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        self.proj = nn.Linear(arch["k"], arch["n"], bias=arch["bias"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


class Conv2d(nn.Module):
    """One 2-D convolution: k filters of c/groups x r x s over [n, c, h, w]."""

    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        c, k, groups = arch["c"], arch["k"], arch["groups"]
        if c % groups or k % groups:
            raise BadInput("arch.groups", groups, f"expected a divisor of c={c} and k={k}")
        p = (arch["h"] + 2 * arch["padding"] - arch["r"]) // arch["stride"] + 1
        q = (arch["w"] + 2 * arch["padding"] - arch["s"]) // arch["stride"] + 1
        if p < 1 or q < 1:
            raise BadInput("arch.r", (arch["r"], arch["s"]),
                           "the filter is larger than the padded input")
        self.conv = nn.Conv2d(c, k, (arch["r"], arch["s"]), arch["stride"], arch["padding"],
                              groups=groups, bias=arch["bias"])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class SDPA(nn.Module):
    """One scaled-dot-product attention; grouped-query when kv_heads < h."""

    def __init__(self, arch: dict[str, Any]):
        super().__init__()
        if arch["h"] % arch["kv_heads"]:
            raise BadInput("arch.kv_heads", arch["kv_heads"],
                           f"expected a divisor of h={arch['h']}")
        self.causal = arch["causal"]
        self.gqa = arch["kv_heads"] != arch["h"]

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal,
                                              enable_gqa=self.gqa)


def _inputs(name: str, shapes):
    def inputs(arch: dict[str, Any], phase: str, batch: int, seq: int = 0, context: int = 0):
        """Deterministic float inputs; ``batch`` multiplies the leading dimension."""
        check_phase(name, phase, ("forward",))
        check_count("batch", batch)
        return tuple(example_floats(*shape) for shape in shapes(arch, batch)), {}
    return inputs


def _conv_variables(a: dict[str, Any], phase: str, batch: int, seq: int,
                    context: int) -> dict[str, int] | None:
    """Batch, images, channels and filters per group, output rows and columns, and what the
    input has beyond the last window (0 or 1; more: None). Filter size, stride, padding and
    groups stay those of the family."""
    g, stride, pad = a["groups"], a["stride"], a["padding"]
    if a["c"] % g or a["k"] % g:
        return None
    span_h, span_w = a["h"] + 2 * pad - a["r"], a["w"] + 2 * pad - a["s"]
    if span_h < 0 or span_w < 0 or span_h % stride > 1 or span_w % stride > 1:
        return None
    return {"B": batch, "n": a["n"], "cg": a["c"] // g, "kg": a["k"] // g,
            "P": span_h // stride + 1, "Q": span_w // stride + 1,
            "rh": span_h % stride, "rw": span_w % stride}


def _conv_point(v: dict[str, int], phase: str, a: dict[str, Any]
                ) -> tuple[dict[str, Any], int, int, int]:
    g, stride, pad = a["groups"], a["stride"], a["padding"]
    return ({"n": v["n"], "c": g * v["cg"], "k": g * v["kg"],
             "h": (v["P"] - 1) * stride + a["r"] - 2 * pad + v["rh"],
             "w": (v["Q"] - 1) * stride + a["s"] - 2 * pad + v["rw"]}, v["B"], 0, 0)


def _sdpa_variables(a: dict[str, Any], phase: str, batch: int, seq: int,
                    context: int) -> dict[str, int] | None:
    """Batch, query and key lengths, head size, KV heads and the query heads per KV head."""
    if a["h"] % a["kv_heads"]:
        return None
    return {"B": batch, "b": a["b"], "sq": a["sq"], "skv": a["skv"], "d": a["d"],
            "kv": a["kv_heads"], "g": a["h"] // a["kv_heads"]}


def _sdpa_point(v: dict[str, int], phase: str, _: dict[str, Any]
                ) -> tuple[dict[str, Any], int, int, int]:
    return ({"b": v["b"], "sq": v["sq"], "skv": v["skv"], "d": v["d"], "kv_heads": v["kv"],
             "h": v["kv"] * v["g"]}, v["B"], 0, 0)


# Default sizes of the micro workloads are example sizes [E], meant to be overridden.
register(ModelSpec(
    name="linear", family="micro", description="one GEMM: [m, k] x [k, n]",
    arch={"m": 1024, "k": 1024, "n": 1024, "bias": False},
    build=Linear, inputs=_inputs("linear", lambda a, b: [(b * a["m"], a["k"])]),
    sizes=SizeRule(None, lambda a, phase, batch, seq, context: {
        "B": batch, "m": a["m"], "k": a["k"], "n": a["n"]},
        lambda v, phase, _: ({"m": v["m"], "k": v["k"], "n": v["n"]}, v["B"], 0, 0))))

register(ModelSpec(
    name="conv2d", family="micro", description="one 2-D convolution (NCHW)",
    arch={"n": 1, "c": 64, "h": 56, "w": 56, "k": 64, "r": 3, "s": 3, "stride": 1,
          "padding": 1, "groups": 1, "bias": False},
    # padding may be 0; the rest of the keys must be positive.
    arch_choices={"padding": tuple(range(0, 33))},
    build=Conv2d, sizes=SizeRule(None, _conv_variables, _conv_point),
    inputs=_inputs("conv2d", lambda a, b: [(b * a["n"], a["c"], a["h"], a["w"])])))

register(ModelSpec(
    name="sdpa", family="micro", description="one scaled-dot-product attention",
    arch={"b": 1, "h": 32, "sq": 1024, "skv": 1024, "d": 128, "causal": True, "kv_heads": 32},
    build=SDPA, sizes=SizeRule(None, _sdpa_variables, _sdpa_point),
    inputs=_inputs("sdpa", lambda a, b: [(b * a["b"], a["h"], a["sq"], a["d"]),
                                         (b * a["b"], a["kv_heads"], a["skv"], a["d"]),
                                         (b * a["b"], a["kv_heads"], a["skv"], a["d"])])))
