"""Technology model: energy per operation and per byte, area per unit, leakage; per node.

Reference node 45 nm, 0.9 V. Each constant names its source; [P] published table, [D] datasheet,
[E] estimate (derived as the docstring says, check before relying on it).
"""

from __future__ import annotations

import math

from accelerators.memory_standards import get_standard
from dse.errors import BadInput

REFERENCE_NODE_NM = 45

#: Energy of one multiply-accumulate at 45 nm, pJ. Horowitz, ISSCC 2014 [P]: mult + add.
#: fp32 3.7 + 0.9; fp16 1.1 + 0.4 (bf16 taken equal to fp16 [E]); int8 0.2 + 0.03;
#: fp8 [E] between int8 and fp16: 0.4 + 0.1.
MAC_ENERGY_PJ = {"fp32": 4.6, "fp16": 1.5, "bf16": 1.5, "fp8": 0.5, "int8": 0.23}

#: Energy of one non-MAC vector op (add/compare/exp step) at 45 nm, pJ: the adder of
#: Horowitz 2014 [P]; int8 taken as an 8-bit add.
VECTOR_OP_ENERGY_PJ = {"fp32": 0.9, "fp16": 0.4, "bf16": 0.4, "fp8": 0.2, "int8": 0.03}

#: Register-file access energy, pJ/B at 45 nm [E]: about one tenth of an 8 KB SRAM access,
#: the Eyeriss (Chen et al., ISCA 2016) ratio RF : SRAM of about 1 : 6-10.
REGISTER_PJ_PER_BYTE = 0.15

#: SRAM read energy at 45 nm [P, Horowitz 2014]: 64-bit read 10 pJ at 8 KB, 20 pJ at 32 KB,
#: 100 pJ at 1 MB; fitted as E(S) = 1.25 pJ/B x (S / 8 KB)^0.475 (exact at 8 KB and 1 MB,
#: 2.41 vs 2.5 pJ/B at 32 KB) for one bank (:func:`sram_energy_j_per_byte`).
_SRAM_PJ_PER_BYTE_8KB = 1.25
_SRAM_SIZE_EXPONENT = math.log(10) / math.log(128)
#: The bank (macro) one access of a larger SRAM reads: scratchpads, buffers and caches are
#: built of many small banks [R NVDLA hardware architectural specification (nvdla/doc,
#: hwarch.rst): convolution-buffer banks of 4-32 KiB, its large configuration 16 banks of
#: 32 KiB; P Chen et al., Eyeriss, JSSC 2017: a 108 KB global buffer of 27 banks of 4 KB].
SRAM_BANK_BYTES = 32 * 1024

#: On-chip network energy per byte per mm of wire at 45 nm, pJ/(B mm) [E]: ~0.1 pJ/bit/mm for
#: repeated global wires (Dally, "GPUs and the future of parallel computing", 2011).
NOC_PJ_PER_BYTE_MM = 0.8

#: Area at 45 nm, mm^2. One MAC [E, synthesis figures quoted by Eyeriss/Timeloop-Accelergy
#: examples: ~280 um^2 int8, ~1,600 um^2 fp16/bf16, ~4,000 um^2 fp32].
MAC_AREA_MM2 = {"fp32": 4.0e-3, "fp16": 1.6e-3, "bf16": 1.6e-3, "fp8": 8.0e-4, "int8": 2.8e-4}
#: Cell area of one systolic processing element at 45 nm, um^2: multiplier + accumulator adder +
#: pipeline registers (the moving operand, the stationary one double-buffered, the partial sum).
#: Components [P Horowitz, ISSCC 2014, area at 45 nm: 8-bit multiply 282, 32-bit add 137, fp16
#: multiply 1,640, fp32 add 4,184, fp32 multiply 7,700 um^2] and a flip-flop 4.52 um^2 per bit
#: [D Nangate FreePDK45 Open Cell Library, DFF_X1; MUX2_X1 1.862 um^2]. int8: 8-bit multiply +
#: 32-bit integer accumulate + 3 x 8 + 32 register bits; fp16/bf16: fp16 multiply + fp32
#: accumulate + 3 x 16 + 32 bits; fp8: an 8-bit float multiply taken as 1.5 x the 8-bit integer
#: one + fp32 accumulate + 3 x 8 + 32 bits [E]; fp32: fp32 multiply + add + 3 x 32 + 32 bits.
FLIP_FLOP_UM2 = 4.52
MUX2_UM2 = 1.862
PE_CELLS_UM2_45NM = {
    "int8": 282 + 137 + 56 * FLIP_FLOP_UM2,
    "fp8": 1.5 * 282 + 4184 + 56 * FLIP_FLOP_UM2,
    "fp16": 1640 + 4184 + 80 * FLIP_FLOP_UM2,
    "bf16": 1640 + 4184 + 80 * FLIP_FLOP_UM2,
    "fp32": 7700 + 4184 + 128 * FLIP_FLOP_UM2,
}
#: Cell area over laid-out area of logic [P-derived: the bf16 PE cells above against the
#: matrix units Google published as shares of their dies (Jouppi et al., ISCA 2021, Table 7:
#: TPUv2 8 % of < 625 mm^2 for 32,768 PEs at 16 nm, TPUv3 11 % of < 700 mm^2 for 65,536 at
#: 16 nm, TPUv4i 11 % of < 400 mm^2 for 65,536 at 7 nm) give 0.69, 0.90 and 0.51, geometric
#: mean 0.68; ``dse.calibrate.physical_fit.derived_constants`` recomputes it]. TPUv1's int8
#: matrix unit (24 % of < 331 mm^2 for 65,536 PEs at 28 nm) gives 0.24: the int8 PE above is
#: about 3x smaller than TPUv1's, a known miss (docs/validation.md, physical model).
LOGIC_PLACEMENT_UTILISATION = 0.68
#: Laid-out area of one systolic processing element at 45 nm, um^2.
PE_AREA_UM2_45NM = {k: v / LOGIC_PLACEMENT_UTILISATION for k, v in PE_CELLS_UM2_45NM.items()}

#: High-density 6T SRAM bit cell by node, um^2 [P: TSMC N65 0.525 (2006), N40 0.242, N28
#: 0.127, N20 0.081, N16 0.074, N10 0.042 (ISSCC / IEDM announcements), N7 0.027 (IEDM 2016),
#: N5 0.021 (IEDM 2019)]; 45 nm as N40, 32 nm between N40 and N28 [E], 22 nm as N20, 14/12 nm
#: as N16, 4 nm as N5 (an N5-family node).
SRAM_BITCELL_UM2 = {65: 0.525, 45: 0.242, 32: 0.171, 28: 0.127, 22: 0.081, 16: 0.074,
                    14: 0.074, 12: 0.074, 10: 0.042, 7: 0.027, 5: 0.021, 4: 0.021}
#: Bit cells over the laid-out area of an SRAM block (periphery, redundancy, banking, the
#: block's own routing) [P/S-derived: TPUv1's 24 MiB Unified Buffer is 29 % of its < 331 mm^2
#: die at 28 nm (Jouppi et al., ISCA 2017, Fig. 2): 0.27; TPUv4i's 128 MiB CMEM 28 % of its
#: < 400 mm^2 die at 7 nm (Jouppi et al., ISCA 2021): 0.26; half of a 0.038 mm^2 WSE-2 core
#: is its 48 KB (Cerebras, Hot Chips 34): 0.56; geometric mean 0.34, recomputed by
#: ``dse.calibrate.physical_fit.derived_constants``]. AMD's SRAM-only 3D V-Cache die (64 MiB
#: on 41 mm^2 at N7) gives 0.35.
SRAM_ARRAY_EFFICIENCY = 0.34
#: Leakage at 45 nm [E]: SRAM ~ 0.9 uW/KB... expressed per mm^2 of logic and per KB of SRAM.
LOGIC_LEAKAGE_W_PER_MM2 = 0.02
SRAM_LEAKAGE_W_PER_KB = 1.5e-5

#: Scaling from 45 nm to other nodes: (energy factor, area factor) [E, after the fitted trends of
#: Stillmaker & Baas, "Scaling equations for the accurate prediction of CMOS device performance
#: from 180 nm to 7 nm", Integration 2017; 5 nm and 4 nm extrapolated], except 4 nm's area:
#: N4 and NVIDIA's 4N are N5-family nodes, so 4 nm is 5 nm's area over 1.06 [S: TSMC, N4P
#: announcement, Oct. 2021: 6 % more transistor density than N5].
NODE_SCALING = {
    65: (1.50, 2.080), 45: (1.00, 1.000), 32: (0.72, 0.540), 28: (0.62, 0.430), 22: (0.50, 0.300),
    16: (0.36, 0.170), 14: (0.33, 0.150), 12: (0.30, 0.120), 10: (0.26, 0.085),
    7: (0.22, 0.055), 5: (0.18, 0.038), 4: (0.16, 0.0358),
}
NODES_NM = tuple(sorted(NODE_SCALING))


def _scaling(node_nm: int) -> tuple[float, float]:
    try:
        return NODE_SCALING[int(node_nm)]
    except KeyError:
        raise BadInput("node_nm", node_nm, "expected one of " + ", ".join(map(str, NODES_NM))) from None


def energy_scale(node_nm: int) -> float:
    """Dynamic-energy factor of ``node_nm`` relative to 45 nm."""
    return _scaling(node_nm)[0]


def area_scale(node_nm: int) -> float:
    """Area factor of ``node_nm`` relative to 45 nm."""
    return _scaling(node_nm)[1]


def mac_energy_j(dtype: str, node_nm: int) -> float:
    """Energy of one MAC, J."""
    return MAC_ENERGY_PJ[dtype] * 1e-12 * energy_scale(node_nm)


def vector_op_energy_j(dtype: str, node_nm: int) -> float:
    """Energy of one elementwise op, J."""
    return VECTOR_OP_ENERGY_PJ[dtype] * 1e-12 * energy_scale(node_nm)


def sram_energy_j_per_byte(size_bytes: float, node_nm: int) -> float:
    """Energy to read or write one byte of an SRAM of ``size_bytes``, J/B: one bank's access
    (Horowitz's fit at ``min(size, SRAM_BANK_BYTES)``) plus, in an SRAM of several banks, the
    wire from the bank to the SRAM's edge (``NOC_PJ_PER_BYTE_MM`` over half the side of the
    square the SRAM's other banks take, :func:`sram_area_mm2`) [E]."""
    size = max(float(size_bytes), 1024.0)
    bank = min(size, SRAM_BANK_BYTES)
    pj = _SRAM_PJ_PER_BYTE_8KB * (bank / 8192.0) ** _SRAM_SIZE_EXPONENT
    if size > bank:
        pj += NOC_PJ_PER_BYTE_MM * 0.5 * (math.sqrt(sram_area_mm2(size, node_nm))
                                          - math.sqrt(sram_area_mm2(bank, node_nm)))
    return pj * 1e-12 * energy_scale(node_nm)


def register_energy_j_per_byte(node_nm: int) -> float:
    return REGISTER_PJ_PER_BYTE * 1e-12 * energy_scale(node_nm)


def dram_energy_j_per_byte(kind: str) -> float:
    """Off-chip memory energy (I/O + DRAM core) of the standard ``kind``, J/B
    (:mod:`accelerators.memory_standards`)."""
    return get_standard(kind, "memory").energy_j_per_byte


def noc_energy_j_per_byte(distance_mm: float, node_nm: int) -> float:
    return NOC_PJ_PER_BYTE_MM * distance_mm * 1e-12 * energy_scale(node_nm)


def mac_area_mm2(dtype: str, node_nm: int) -> float:
    return MAC_AREA_MM2[dtype] * area_scale(node_nm)


def pe_area_mm2(dtype: str, node_nm: int) -> float:
    """Laid-out area of one systolic processing element (``PE_AREA_UM2_45NM``), mm^2."""
    return PE_AREA_UM2_45NM[dtype] * 1e-6 * area_scale(node_nm)


def sram_area_mm2(size_bytes: float, node_nm: int) -> float:
    """Macro area of ``size_bytes`` of SRAM: bit cells over the array efficiency, mm^2."""
    _scaling(node_nm)
    return size_bytes * 8 * SRAM_BITCELL_UM2[int(node_nm)] * 1e-6 / SRAM_ARRAY_EFFICIENCY


def leakage_w(logic_area_mm2: float, sram_bytes: float, node_nm: int) -> float:
    """Static power of ``logic_area_mm2`` of logic (already at ``node_nm``) plus SRAM, W.

    Leakage per mm^2 is taken as node-independent to first order [E]: density grows as leakage
    per device falls.
    """
    return LOGIC_LEAKAGE_W_PER_MM2 * logic_area_mm2 + SRAM_LEAKAGE_W_PER_KB * sram_bytes / 1024.0

#: 32-bit integer operation energy at 45 nm, pJ [P Horowitz, ISSCC 2014: 32-bit add 0.1 pJ,
#: 32-bit multiply 3.1 pJ]; an XOR or AND taken as an add [E]. Used for hash-grid indexing.
INT32_OP_ENERGY_PJ = {"add": 0.1, "mult": 3.1}
