"""Published facts about real accelerators, to check and calibrate the physical model against.

Each die area, TDP, block share and cost estimate names its source with a confidence tag: [D]
datasheet or vendor whitepaper, [P] peer-reviewed paper, [S] secondary (press, analysts) —
weaker, [E] estimate. The accelerator each chip maps to is a shipped preset, so what is
validated is what users get (``accelerators/npu.py``, ``gpu.py``, ``wafer.py`` presets; their
comments give the sources of every architectural parameter).
"""

from __future__ import annotations

from dataclasses import dataclass

_TEN_LESSONS = "[P] Jouppi et al., 'Ten lessons from three generations shaped Google's TPUv4i', ISCA 2021"
_TPU_V1 = "[P] Jouppi et al., 'In-datacenter performance analysis of a tensor processing unit', ISCA 2017"


@dataclass(frozen=True)
class PublishedChip:
    """A real chip: its die area (``upper_bound``: the source says "< die_mm2", used as the
    value), the shipped design that models it, and its TDP (``tdp_basis``: "board" for a
    card's power limit, memory included; "chip" for the package, memory excluded where the
    source says so; "wafer")."""

    name: str
    accelerator: str          #: "template:preset"
    die: str                  #: rows naming the same die are left out of fits together
    die_mm2: float
    die_source: str
    tdp_w: float
    tdp_source: str
    tdp_basis: str = "board"
    upper_bound: bool = False


@dataclass(frozen=True)
class BlockShare:
    """A block of a published die plan: ``share`` of the die; ``count`` PEs of ``dtype``
    (kind "pe"), bytes (kind "sram") or SMs of the gpu preset ``dtype`` names (kind "sm") at
    ``node_nm``. ``die_mm2``: the die's area where it is none of :data:`CHIPS`."""

    die: str
    block: str
    share: float
    kind: str
    count: int
    node_nm: int
    source: str
    dtype: str = ""
    die_mm2: float = 0.0


CHIPS: tuple[PublishedChip, ...] = (
    PublishedChip("A100 SXM", "gpu:a100", "GA100", 826.0,
                  "[D] NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020)", 400.0,
                  "[D] A100 SXM4 datasheet"),
    PublishedChip("H100 SXM", "gpu:h100", "GH100", 814.0,
                  "[D] NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022)", 700.0,
                  "[D] H100 SXM5 datasheet"),
    PublishedChip("H200 SXM", "gpu:h200", "GH100", 814.0,
                  "[D] same GH100 die as the H100 (NVIDIA H200 datasheet)", 700.0,
                  "[D] H200 SXM datasheet"),
    PublishedChip("T4", "gpu:t4", "TU104", 545.0,
                  "[D] NVIDIA Turing GPU Architecture whitepaper (2018), TU104", 70.0,
                  "[D] T4 datasheet"),
    PublishedChip("RTX 3090", "gpu:rtx3090", "GA102", 628.4,
                  "[D] NVIDIA Ampere GA102 GPU Architecture whitepaper (2020)", 350.0,
                  "[D] GeForce RTX 3090 specifications"),
    PublishedChip("TPUv1", "npu:tpu-v1-like", "TPUv1", 331.0,
                  f"{_TPU_V1} (less than half of Haswell's 662 mm^2)", 75.0,
                  f"{_TEN_LESSONS}, Table 1", "chip", upper_bound=True),
    PublishedChip("TPUv2", "npu:tpu-v2", "TPUv2", 625.0, f"{_TEN_LESSONS}, Table 1", 280.0,
                  f"{_TEN_LESSONS}, Table 1 (chip TDP; system TDP adds the memory)", "chip",
                  upper_bound=True),
    PublishedChip("TPUv3", "npu:tpu-v3", "TPUv3", 700.0, f"{_TEN_LESSONS}, Table 1", 450.0,
                  f"{_TEN_LESSONS}, Table 1", "chip", upper_bound=True),
    PublishedChip("TPUv4i", "npu:tpu-v4i", "TPUv4i", 400.0, f"{_TEN_LESSONS}, Table 1", 175.0,
                  f"{_TEN_LESSONS}, Table 1", "chip", upper_bound=True),
    PublishedChip("Groq TSP", "npu:groq-tsp", "TSP", 725.0,
                  "[P] Abts et al., 'Think fast: a tensor streaming processor', ISCA 2020: "
                  "25 x 29 mm", 300.0,
                  "[S] TechSpot, Jan. 2020 ('300 W per chip'); no datasheet TDP found", "chip"),
    PublishedChip("MTIA v1", "npu:mtia-v1", "MTIA v1", 373.0,
                  "[P] Firoozshahian et al., 'MTIA: first generation silicon targeting Meta's "
                  "recommendation systems', ISCA 2023: 19.34 x 19.1 mm (as quoted by secondary "
                  "summaries)", 25.0, "[D] Meta AI blog, May 2023", "chip"),
    PublishedChip("Cerebras WSE-2", "wafer:wse2", "WSE-2", 46225.0,
                  "[D] Cerebras WSE-2 announcement (2021)", 14800.0,
                  "[P] WaferLLM, OSDI 2025: 37x an A100's 400 W", "wafer"),
)

#: Blocks of published die plans: they calibrate the logic placement utilisation, the SRAM
#: array efficiency and the gpu's SM base area (``physical_fit.derived_constants``).
BLOCKS: tuple[BlockShare, ...] = (
    BlockShare("TPUv1", "matrix unit (256x256 int8)", 0.24, "pe", 65536, 28,
               f"{_TEN_LESSONS}, Table 7", "int8"),
    BlockShare("TPUv2", "2 MXUs (128x128 bf16)", 0.08, "pe", 32768, 16,
               f"{_TEN_LESSONS}, Table 7", "bf16"),
    BlockShare("TPUv3", "4 MXUs (128x128 bf16)", 0.11, "pe", 65536, 16,
               f"{_TEN_LESSONS}, Table 7", "bf16"),
    BlockShare("TPUv4i", "4 MXUs (128x128 bf16)", 0.11, "pe", 65536, 7,
               f"{_TEN_LESSONS}, Table 7", "bf16"),
    BlockShare("TPUv1", "Unified Buffer (24 MiB)", 0.29, "sram", 24 * 2**20, 28,
               f"{_TPU_V1}, Fig. 2"),
    BlockShare("TPUv4i", "CMEM (128 MiB)", 0.28, "sram", 128 * 2**20, 7,
               f"{_TEN_LESSONS}, Sec. 3"),
    # half of each of the 850,000 cores of 0.038 mm^2 is its 48 KB of SRAM
    BlockShare("WSE-2", "core SRAMs (850,000 x 48 KB)", 0.5 * 0.038 * 850_000 / 46225.0, "sram",
               850_000 * 48 * 1024, 7,
               "[S] Cerebras at Hot Chips 34 (2022), as reported by ServeTheHome: a core is "
               "38,000 um^2, half SRAM, half logic (110k standard cells)"),
    # one TPC of TU106 (not a validated die; the T4's TU104 has the same Turing SM) less its
    # two RT cores (gpu.RT_CORE_MM2_45NM): it sets the gpu template's SM base area
    # (gpu.SM_BASE_MM2_45NM)
    BlockShare("TU106", "TPC less its RT cores (2 Turing SMs)", (10.89 - 0.7) / 445.0, "sm", 2,
               12, "[S] Hardwareluxx, 'Turing: RT und Tensor Cores belegen nur wenig "
               "Chipfläche' (2019): 10.89 mm^2 per TPC, 0.7 of it RT cores, measured on TU106 "
               "die shots by OC_Burner; TU106 445 mm^2 [D NVIDIA Turing whitepaper]", "t4",
               die_mm2=445.0),
)


@dataclass(frozen=True)
class CostEstimate:
    """A published estimate of what one chip costs its vendor to make (not its price)."""

    accelerator: str
    cost_usd: float
    source: str
    breakdown_usd: tuple[tuple[str, float], ...] = ()


_SILICON_ANALYSTS = ("[S] Silicon Analysts, 'Cost bridge' and 'NVIDIA B200 cost breakdown' "
                     "(Feb. 2026), built on Epoch AI Monte Carlo models, Raymond James and "
                     "TrendForce")

COST_ESTIMATES: tuple[CostEstimate, ...] = (
    CostEstimate("gpu:h100", 3320.0,
                 "[S] Raymond James (2023) via Barron's, adopted by Epoch AI "
                 "(github.com/epoch-research/training-cost-trends; an independent estimate "
                 "there: ~3,000); breakdown " + _SILICON_ANALYSTS + " (a 2023 press "
                 "breakdown: die ~$200, 80 GB of HBM ~$1,500, CoWoS ~$723). The model's "
                 "interposer price is taken from this breakdown's packaging line",
                 (("logic die", 300.0), ("HBM (80 GB)", 1400.0), ("CoWoS-S packaging", 750.0),
                  ("test and assembly", 920.0))),
    CostEstimate("gpu:h200", 4800.0, _SILICON_ANALYSTS),
    CostEstimate("gpu:b200", 6400.0, _SILICON_ANALYSTS,
                 (("HBM3E (192 GB)", 2900.0), ("CoWoS-L packaging", 1100.0))),
    CostEstimate("gpu:mi300x", 5300.0, _SILICON_ANALYSTS,
                 (("logic dies", 600.0), ("HBM3 (192 GB)", 2900.0), ("packaging", 1200.0),
                  ("test and assembly", 600.0))),
)
