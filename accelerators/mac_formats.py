"""Multiply-accumulate units per number format: energy per MAC, area, and which operand
formats a unit runs (the datapaths of the npu, pim, npu_pim, wafer and neural_graphics
templates; the gpu's datapaths are its datasheet peaks, :mod:`accelerators.gpu_formats`).

Two families:

* **Classic MACs** (``fp32 fp16 bf16 fp8 int8``, the templates' historic ``dtype`` values):
  the technology tables (:mod:`accelerators.technology`: Horowitz's multiplier + adder at the
  element width) unchanged, so a design built with them costs what it always did.
* **Dot-product units** (every other format of :data:`MAC_FORMATS`): built from Horowitz's
  45 nm components [P Horowitz, "Computing's energy problem", ISSCC 2014: 8-bit multiply
  0.2 pJ / 282 um^2, 32-bit multiply 3.1 pJ / 3,495 um^2, 8-bit add 0.03 pJ / 36 um^2, 32-bit
  add 0.1 pJ / 137 um^2, fp16 multiply 1.1 pJ / 1,640 um^2, fp32 multiply 3.7 pJ / 7,700
  um^2, fp16 add 0.4 pJ / 1,360 um^2, fp32 add 0.9 pJ / 4,184 um^2] with these scaling rules
  [E, stated so they can be checked]:

  - an n-bit integer multiplier's energy and area grow as ``n**p``, ``p`` fitted through the
    8- and 32-bit points (energy 1.98, area 1.82: an array multiplier's n^2 partial products);
    an n-bit adder as ``n**q`` through its 8- and 32-bit points (energy 0.87, area 0.96);
  - a per-element MAC as the dot-product units of MX hardware build it (Rouhani et al.,
    "Microscaling data formats for deep learning", 2023, Sec. 3; the OCP MX v1.0 spec's dot
    product): the significands multiply exactly (an integer multiplier of ``man + 1`` bits,
    the exponents added by a ``exp``-bit adder); a float product is aligned by a barrel shifter
    of ``exp + 1`` stages (one 2:1 mux per bit and stage: Nangate45 MUX2_X1 1.862 um^2,
    energy taken as the area ratio to a full-adder bit times the 32-bit adder's energy per
    bit, 1.35 fJ) into a fixed-point sum of ``w = 2 (man + 1) + 2**(exp + 1) + log2(block)``
    bits (integers: ``2 n + log2(block)``), added by one w-bit adder (the tree's share);
  - once per block of ``block`` MACs: the block's sum joins an fp32 accumulator (an fp32
    add) and the scales are combined: MX, two E8M0 exponent adds (8-bit adds); NVFP4, the two
    E4M3 scales multiplied (4-bit significands) and the 24-bit partial sum multiplied by that
    8-bit product; integer groups (GPTQ's FP16 scales), an fp16 multiply of the partial sum,
    and a zero point's correction (an n-bit multiply and a 32-bit add) when there is one.
    A plain narrow format (``fp8_e4m3``, ``int4`` ...) has a per-tensor scale: its dot product
    runs 32 elements (:data:`DOT_LENGTH`) per fp32 (int32 for integers) accumulate.

Nodes other than 45 nm: :func:`accelerators.technology.energy_scale` / ``area_scale``.

**What a unit runs** (:func:`support`): an operand whose element is exactly representable in
the unit's element (floats: no more exponent nor mantissa bits; integers in a float: the
magnitude within its significand; integers in integers: no more bits; ternary anywhere) runs
``native`` when it needs no scales the unit lacks: a per-tensor scale, or the block scaling
the unit itself is built with (an ``mxfp4`` unit runs MXFP4 and FP4 operands). An operand
with block or group scales the unit lacks is ``dequant``: each element read from the
scratchpad into the array is multiplied by its scale on the way (one multiply in the unit's
format per element read), which only a float unit of at least 5 exponent bits (fp16, bf16,
fp32, E5M2) can hold; anything else is refused (None).
"""

from __future__ import annotations

import math
from functools import lru_cache

from accelerators import technology as tech
from workloads import ir
from workloads.formats import GEMM_KINDS, Format, get_format, has_formats, op_formats
from workloads.memo import per_workload

#: MAC units a template's ``dtype`` may name: the classic ones first (their technology-table
#: costs), then the dot-product units of this module.
CLASSIC = ("fp32", "fp16", "bf16", "fp8", "int8")
MAC_FORMATS = CLASSIC + ("fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1", "int4",
                         "int2", "mxfp8_e4m3", "mxfp8_e5m2", "mxfp6_e2m3", "mxfp6_e3m2",
                         "mxfp4", "mxint8", "nvfp4")

#: Elements one dot product of a plain narrow format sums before its fp32 / int32 accumulate
#: [E: the MX block, so plain and MX units differ only by their scales].
DOT_LENGTH = 32

# Horowitz, ISSCC 2014, 45 nm [P]: (energy pJ, area um^2)
_INT_MULT = {8: (0.2, 282.0), 32: (3.1, 3495.0)}
_INT_ADD = {8: (0.03, 36.0), 32: (0.1, 137.0)}
_FP_MULT = {(5, 10): (1.1, 1640.0), (8, 23): (3.7, 7700.0)}
_FP_ADD = {16: (0.4, 1360.0), 32: (0.9, 4184.0)}
#: One 2:1 mux [D Nangate FreePDK45 MUX2_X1: 1.862 um^2]; its energy [E] the 32-bit adder's
#: energy per bit (0.1 pJ / 32) times the mux's area over a full-adder bit's (1.862 / (137/32)).
MUX_UM2 = tech.MUX2_UM2
MUX_PJ = 0.1 / 32 * MUX_UM2 / (137.0 / 32)


def _power(points: dict, n: float, which: int) -> float:
    (n0, v0), (n1, v1) = sorted((k, v[which]) for k, v in points.items())
    p = math.log(v1 / v0) / math.log(n1 / n0)
    return v0 * (n / n0) ** p


def int_mult(n: float) -> tuple[float, float]:
    """(pJ, um^2) of an n x n-bit integer multiplier at 45 nm."""
    return _power(_INT_MULT, n, 0), _power(_INT_MULT, n, 1)


def int_mult_rect(n: float, m: float) -> tuple[float, float]:
    """(pJ, um^2) of an n x m-bit integer multiplier: a square one of sqrt(n m) bits."""
    return int_mult(math.sqrt(n * m))


def int_add(n: float) -> tuple[float, float]:
    """(pJ, um^2) of an n-bit integer adder at 45 nm."""
    return _power(_INT_ADD, n, 0), _power(_INT_ADD, n, 1)


def fp_add32() -> tuple[float, float]:
    return _FP_ADD[32]


@lru_cache(maxsize=64)
def unit(name: str) -> dict[str, float]:
    """The dot-product unit of format ``name`` at 45 nm: ``mac_pj`` and ``mac_um2`` per MAC
    (block share included), ``sum_bits`` (its fixed-point sum width) and ``block``."""
    f = get_format(name, "hw.dtype")
    e = f.element_format
    block = f.block or DOT_LENGTH
    lb = math.log2(block)
    if e.kind == "float":
        s = e.man + 1
        m_pj, m_um = int_mult(s)
        x_pj, x_um = int_add(e.exp)
        w = 2 * s + 2 ** (e.exp + 1) + lb
        muxes = w * (e.exp + 1)
        a_pj, a_um = int_add(w)
        elem = (m_pj + x_pj + muxes * MUX_PJ + a_pj, m_um + x_um + muxes * MUX_UM2 + a_um)
    else:
        n = max(e.bits, 2)
        m_pj, m_um = int_mult(n)
        w = 2 * n + lb
        a_pj, a_um = int_add(w)
        elem = (m_pj + a_pj, m_um + a_um)
    acc = fp_add32() if (e.kind == "float" or f.scaling != "tensor") else int_add(32)
    per_block = [acc]
    if f.scaling == "mx":
        per_block += [int_add(8), int_add(8)]
    elif f.scaling == "nv":
        sc = get_format(f.scale).element_format
        per_block += [int_mult(sc.man + 1), int_add(sc.exp),
                      int_mult_rect(24, 2 * (sc.man + 1))]
    elif f.scaling == "group":
        per_block += [_FP_MULT[(5, 10)]]
        if f.zero_bits:
            per_block += [int_mult(e.bits), int_add(32)]
    blk_pj = sum(p for p, _ in per_block) / block
    blk_um = sum(a for _, a in per_block) / block
    return {"mac_pj": elem[0] + blk_pj, "mac_um2": elem[1] + blk_um, "sum_bits": w,
            "block": block, "block_pj_per_mac": blk_pj}


def is_classic(name: str) -> bool:
    return name in CLASSIC


def mac_energy_j(name: str, node_nm: int) -> float:
    """Energy of one MAC on a unit of format ``name``, J."""
    if is_classic(name):
        return tech.mac_energy_j(name, node_nm)
    return unit(name)["mac_pj"] * 1e-12 * tech.energy_scale(node_nm)


def mac_area_mm2(name: str, node_nm: int) -> float:
    """Area of one MAC (its block share included) of format ``name``, mm^2."""
    if is_classic(name):
        return tech.mac_area_mm2(name, node_nm)
    return unit(name)["mac_um2"] / tech.LOGIC_PLACEMENT_UTILISATION * 1e-6 * \
        tech.area_scale(node_nm)


def pe_area_mm2(name: str, node_nm: int) -> float:
    """Laid-out area of one systolic processing element of format ``name``: its MAC plus the
    pipeline registers (the moving operand, the stationary one double-buffered, the partial
    sum at the unit's sum width), mm^2 (classic formats: the technology table's PE)."""
    if is_classic(name):
        return tech.pe_area_mm2(name, node_nm)
    u = unit(name)
    bits = get_format(name).element_format.bits
    cells = u["mac_um2"] + (3 * bits + u["sum_bits"]) * tech.FLIP_FLOP_UM2
    return cells / tech.LOGIC_PLACEMENT_UTILISATION * 1e-6 * tech.area_scale(node_nm)


def vector_format(name: str) -> str:
    """The format a design's vector lanes run in: a classic unit's own; bf16 beside a
    narrow dot-product unit [E: MX-class accelerators keep a bf16 vector path for softmax
    and norms]."""
    return name if is_classic(name) else "bf16"


def storage_bytes(name: str) -> int:
    """Whole bytes per element a unit's format takes (a scratchpad's minimal tile; a workload
    without formats is rescaled to it)."""
    if is_classic(name):
        return {"fp32": 4, "fp16": 2, "bf16": 2, "fp8": 1, "int8": 1}[name]
    return max(1, math.ceil(get_format(name).element_format.bits / 8))


def embeds(x: Format, into: Format) -> bool:
    """True when every value of element type ``x`` is a value of element type ``into``."""
    if x.kind == "ternary":
        return True
    if into.kind == "float":
        if x.kind == "float":
            return x.exp <= into.exp and x.man <= into.man
        return x.bits - 1 <= into.man + 1
    if into.kind == "int":
        return x.kind == "int" and x.bits <= into.bits
    return False


def _unit_format(name: str) -> Format:
    return get_format("fp8_e4m3" if name == "fp8" else name)


def support(unit_name: str, operand: Format) -> str | None:
    """How a MAC unit of format ``unit_name`` runs an operand in ``operand``: ``native``,
    ``dequant`` (scaled into the unit's format between scratchpad and array) or None."""
    u = _unit_format(unit_name)
    if not embeds(operand.element_format, u.element_format):
        return None
    if operand.scaling == "tensor":
        return "native"
    if operand.scaling == u.scaling and operand.block == u.block:
        return "native"
    ue = u.element_format
    if ue.kind == "float" and ue.exp >= 5:
        return "dequant"
    return None


def runs(unit_name: str) -> list[str]:
    """Operand formats (of :data:`workloads.formats.FORMATS`) a unit runs, for messages."""
    from workloads.formats import FORMATS
    return [n for n, f in FORMATS.items() if support(unit_name, f)]


def operand_problem(unit_name: str, role: str, operand: Format) -> str | None:
    """Why a unit of ``unit_name`` cannot take ``operand`` as the ``role`` operand, or None."""
    if support(unit_name, operand) is not None:
        return None
    return (f"a {unit_name} MAC array cannot run {role} in {operand.name} (runs "
            + ", ".join(runs(unit_name)) + ")")


def operand_modes(unit_name: str, op: ir.Op) -> tuple[str, str] | str:
    """How a MAC array of format ``unit_name`` takes a GEMM-class op's two operands
    (:func:`support`: ``native`` or ``dequant`` each; both ``native`` for an op without
    number formats), or why it cannot (a message)."""
    f = op_formats(op)
    if f is None:
        return "native", "native"
    x, y = f.operands(op.kind)
    other = "kv" if op.kind in (ir.ATTENTION, ir.SPARSE_ATTENTION) else "weights"
    modes = []
    for role, fmt in (("activations", x), (other, y)):
        mode = support(unit_name, fmt)
        if mode is None:
            return operand_problem(unit_name, role, fmt)
        modes.append(mode)
    return modes[0], modes[1]


def vector_fallback(unit_name: str, op: ir.Op) -> bool:
    """True when a design whose MAC array of format ``unit_name`` cannot take ``op``'s operands
    runs it on its vector lanes instead: a dot-product unit's lanes are bf16
    (:func:`vector_format`) and take both operands."""
    if is_classic(unit_name):
        return False
    return not isinstance(operand_modes(vector_format(unit_name), op), str)


def workload_problem(unit_name: str, workload: ir.Workload,
                     vector_lanes: bool = False) -> str | None:
    """Why a design whose MAC unit is ``unit_name`` cannot run ``workload``: an operand format
    its array does not take (the first op, by name; with ``vector_lanes`` only one its
    vector lanes do not take either, :func:`vector_fallback`), or a number-format unit given
    a workload without formats (it has no storage type of its own to rescale the bytes
    to)."""
    if not has_formats(workload):
        if is_classic(unit_name):
            return None
        return (f"hw.dtype = {unit_name} is a number-format MAC unit: give the workload number "
                f"formats per role (--formats / formats:), e.g. weights={unit_name},"
                f"activations={unit_name}")

    def first() -> str | None:
        seen: set = set()
        for op in workload.ops:
            key = (op.kind, op.attrs.get("formats"))
            if op.kind not in GEMM_KINDS or key in seen:
                continue
            seen.add(key)
            modes = operand_modes(unit_name, op)
            if isinstance(modes, str) and not (vector_lanes and vector_fallback(unit_name, op)):
                return f"{modes} (op {op.name})"
        return None
    return per_workload(workload, ("mac-format-problem", unit_name, vector_lanes), first)
