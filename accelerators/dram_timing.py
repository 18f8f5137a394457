"""DRAM timing and the closed-form latency of a PIM command stream (shared by ``pim`` and
``npu_pim``).

A DRAM-PIM in the GDDR6-AiM / Newton / NeuPIMs style computes a GEMV inside the banks: the host
writes the input vector into a channel's global buffer (GWRITE), opens one row in every bank of
the channel (ACTIVATION, four banks per command and one command per tFAW window of a rank),
issues all-bank DOT commands (each bank multiplies ``macs_per_bank`` elements of its open row
with the buffer and accumulates), precharges, and finally reads the per-bank results out
(RDRESULT). One *tile* = one row opened in every bank of the channel.

Everything here is closed form per command group: :func:`gemv_stream` counts the commands of a
whole GEMV and prices them with the timing in O(1), never looping over individual commands.

Latency of a tile, cycles (exact when every tile holds the same number of DOTs)::

    tile = (ceil(banks_per_rank / 4) - 1) * tFAW          # ACT commands, 4 banks each
           + max(tRCD + dots * dot_cycles, tRAS)          # row open, DOTs, tRAS respected
           + tRP                                          # precharge all

With NeuPIMs' HBM2 (32 banks = 2 ranks x 16, tFAW 30, tRCD 14, 32 DOTs x tCCD_L 2, tRP 14) this
gives 90 + 78 + 14 = 182 cycles; the NeuPIMs repository's latency estimator uses 184
[R casys-kaist/NeuPIMs trace-generator/channel_load_balancing.py ``_gemv_latency``].

GWRITE of ``n`` bytes: ``CWL + ceil(n / burst_bytes) * burst_cycles + tWR``; RDRESULT of ``n``
bytes: ``CL + ceil(n / burst_bytes) * burst_cycles``; a single row buffer per bank adds
``tRCD + tRP`` to each GWRITE (:func:`row_switch_cycles`). All-bank refresh steals tRFC every
tREFI: the total is multiplied by ``tREFI / (tREFI - tRFC)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from dse.errors import BadInput


def _cdiv(a: float, b: float) -> int:
    return int(-(-a // b))


@dataclass(frozen=True)
class DramTiming:
    """DRAM timing in cycles of the command clock (``tck_s`` seconds per cycle) plus the
    channel's data-bus burst (``burst_bytes`` every ``burst_cycles``)."""

    tck_s: float
    cl: int
    cwl: int
    trcd: int
    trp: int
    tras: int
    tccd_s: int
    tccd_l: int
    trrd_s: int
    trrd_l: int
    tfaw: int
    twr: int
    trfc: int
    trefi: int
    burst_bytes: int
    burst_cycles: int

    @property
    def channel_bandwidth_Bps(self) -> float:
        """Peak data-bus bandwidth of one channel, B/s."""
        return self.burst_bytes / (self.burst_cycles * self.tck_s)

    @property
    def refresh_factor(self) -> float:
        """Slow-down from all-bank refresh (tRFC lost every tREFI), dimensionless >= 1."""
        return self.trefi / (self.trefi - self.trfc)


#: HBM2 8Gb x128 as NeuPIMs configures it: 1 GHz (tCK 1 ns), CL 14, CWL 4, tRCD 14, tRP 14,
#: tRAS 34, tCCD_S/L 1/2, tRRD_S/L 4/6, tFAW 30, tWR 16, tRFC 260, tREFI 3900; BL4 on a 128-bit
#: channel = 64 B per burst of 2 cycles (32 GB/s per channel)
#: [R umd-memsys/DRAMsim3 configs/HBM2_8Gb_x128.ini, the device behind NeuPIMs'
#: configs/memory_configs/neupims.json; REFERENCES.md].
HBM2 = DramTiming(tck_s=1e-9, cl=14, cwl=4, trcd=14, trp=14, tras=34, tccd_s=1, tccd_l=2,
                  trrd_s=4, trrd_l=6, tfaw=30, twr=16, trfc=260, trefi=3900,
                  burst_bytes=64, burst_cycles=2)

#: GDDR6 8Gb x16 at 16 Gb/s/pin expressed in cycles of the 1 GHz PIM clock (tCK 1 ns): DRAMsim3's
#: GDDR6 timings (tCK 0.66 ns: CL 24, CWL 16, tRCD 24, tRP 24, tRAS 54, tCCD_S/L 3/4,
#: tRRD 9, tFAW 32, tWR 16, tRFC 126, tREFI 11862) converted to ns and rounded up
#: [R hplp/DRAMsim3 configs/GDDR6_8Gb_x16.ini]; a x16 channel moves 32 B per ns (BL16 at
#: 16 Gb/s/pin) [D JEDEC GDDR6 / SK hynix AiM: 16 Gb/s/pin].
GDDR6 = DramTiming(tck_s=1e-9, cl=16, cwl=11, trcd=16, trp=16, tras=36, tccd_s=2, tccd_l=3,
                   trrd_s=6, trrd_l=6, tfaw=22, twr=11, trfc=84, trefi=7829,
                   burst_bytes=32, burst_cycles=1)

TIMINGS = {"hbm2": HBM2, "gddr6": GDDR6}

#: The timing parameters a template exposes, cycles: template parameter name -> DramTiming field.
TIMING_PARAMS = {"cl_cycles": "cl", "cwl_cycles": "cwl", "trcd_cycles": "trcd",
                 "trp_cycles": "trp", "tras_cycles": "tras", "tccd_s_cycles": "tccd_s",
                 "tccd_l_cycles": "tccd_l", "trrd_s_cycles": "trrd_s", "trrd_l_cycles": "trrd_l",
                 "tfaw_cycles": "tfaw", "twr_cycles": "twr", "trfc_cycles": "trfc",
                 "trefi_cycles": "trefi"}


def timing_from(base: DramTiming, clock_hz: float, values: dict) -> DramTiming:
    """``base`` with the clock and any overridden timing fields (template parameter names)."""
    changes = {field: int(values[p]) for p, field in TIMING_PARAMS.items() if p in values}
    return replace(base, tck_s=1.0 / clock_hz, **changes)


def timing_defaults(base: DramTiming) -> dict[str, int]:
    """Template parameter name -> value of ``base``."""
    return {p: getattr(base, field) for p, field in TIMING_PARAMS.items()}


def timing_problem(t: DramTiming) -> tuple[str, int, str] | None:
    """A cross-field inconsistency of ``t`` as (field, value, allowed), or None."""
    if t.tras < t.trcd:
        return ("hw.tras_cycles", t.tras, f"expected tRAS >= tRCD = {t.trcd} cycles")
    if t.trefi <= t.trfc:
        return ("hw.trefi_cycles", t.trefi, f"expected tREFI > tRFC = {t.trfc} cycles")
    if t.tccd_l < t.tccd_s:
        return ("hw.tccd_l_cycles", t.tccd_l, f"expected tCCD_L >= tCCD_S = {t.tccd_s} cycles")
    return None


def random_access_Bps(t: DramTiming, access_bytes: int, banks: int) -> float:
    """Bandwidth of one channel, B/s, for reads of ``access_bytes`` at random addresses, each
    opening a row (tables far larger than the open rows, as hash-grid look-ups are): one
    access per activation, and activations come at most one per tRRD_S, four per tFAW and one
    per tRC (tRAS + tRP) per bank over ``banks`` banks; the access's own bus time bounds it
    too (the peak)."""
    bus = max(1, _cdiv(access_bytes, t.burst_bytes)) * t.burst_cycles
    interval = max(t.trrd_s, t.tfaw / 4, (t.tras + t.trp) / banks, bus)
    return access_bytes / (interval * t.tck_s)


# ---------------------------------------------------------------------------------- energy
#: Row-activation energy of HBM2, pJ per 1 KiB row [P O'Connor et al., "Fine-Grained DRAM",
#: MICRO 2017, Table 3: 909 pJ per activation of a 1 KB row]; scaled linearly with page size.
ACT_PJ_PER_KIB_ROW = 909.0
#: Energy to move one bit from the cell array to the bank edge ("pre-GSA" data movement), pJ/bit
#: [P O'Connor et al. MICRO 2017, Table 3: 1.51 pJ/b]. A PIM DOT reads its operands from the
#: open row into the bank's MAC unit, which sits at the bank edge, so it pays this part only
#: (not post-GSA 1.17 pJ/b nor I/O 0.80 pJ/b).
IN_BANK_READ_PJ_PER_BIT = 1.51

#: Background (active-standby) power of one channel's DRAM, W: IDD3N x VDD of the device
#: [R umd-memsys/DRAMsim3 configs/HBM2_8Gb_x128.ini: 55 mA x 1.2 V per channel;
#: hplp/DRAMsim3 configs/GDDR6_8Gb_x16.ini: 61 mA x 1.35 V per x16 channel].
BACKGROUND_W_PER_CHANNEL = {"hbm2": 0.055 * 1.2, "gddr6": 0.061 * 1.35}


def act_energy_j(page_bytes: int) -> float:
    """Energy of activating one row of ``page_bytes`` in one bank, J."""
    return ACT_PJ_PER_KIB_ROW * (page_bytes / 1024.0) * 1e-12


def in_bank_read_energy_j(nbytes: float) -> float:
    """Energy of reading ``nbytes`` from open rows into the banks' MAC units, J."""
    return IN_BANK_READ_PJ_PER_BIT * 8.0 * nbytes * 1e-12


# ---------------------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class PimGeometry:
    """What the banks of a PIM device look like.

    ``banks`` per channel (all ranks); ``ranks`` share a channel, each with its own tFAW window;
    ``macs_per_bank`` multipliers per bank (elements per DOT); ``page_bytes`` row size;
    ``buffer_bytes`` global buffer per channel (the input vector of one pass);
    ``dot_cycles`` cycles between all-bank DOT commands; ``element_bytes`` data type size
    of the matrix in the banks (a fraction of a byte for a number format with its scales,
    :mod:`workloads.formats`); ``input_bytes`` / ``output_bytes`` those of the input vector
    and the results when they differ (0: ``element_bytes``).
    ``gwrite_row_switch``: the input vector reaches the global buffer from a bank row through
    the banks' only row buffer (Newton's "blocked" PIM, where PIM_GWRITE copies a row into the
    buffer [P NeuPIMs Sec. 5.1-5.2]): every pass opens that row (tRCD) and closes it (tRP)
    before its tiles may open theirs. With NeuPIMs' dual row buffers the vector's row lives in
    the MEM buffer while the PIM buffer opens the tiles, so the switch overlaps the previous
    pass (False); PIM-GPT / AiM writes its buffer from the host bus directly (False).
    """

    channels: int
    ranks: int
    banks: int
    macs_per_bank: int
    page_bytes: int
    buffer_bytes: int
    dot_cycles: int
    element_bytes: float
    input_bytes: float = 0.0
    output_bytes: float = 0.0
    gwrite_row_switch: bool = False

    def __post_init__(self):
        for f in ("channels", "ranks", "banks", "macs_per_bank", "page_bytes", "buffer_bytes",
                  "dot_cycles"):
            if getattr(self, f) < 1:
                raise BadInput(f"hw.{f}", getattr(self, f), "expected a positive int")
        if not self.element_bytes > 0:
            raise BadInput("element_bytes", self.element_bytes, "expected a positive size, B")

    @property
    def banks_per_rank(self) -> int:
        return _cdiv(self.banks, self.ranks)

    @property
    def dot_bytes(self) -> int:
        """Bytes one bank reads from its open row per DOT."""
        return self.macs_per_bank * self.element_bytes

    def problem(self) -> str | None:
        """Why this geometry cannot run any GEMV (a buffer or page smaller than one DOT)."""
        if self.page_bytes < self.dot_bytes:
            return (f"page_bytes = {self.page_bytes} B is smaller than one DOT's operands "
                    f"({self.macs_per_bank} MACs x {self.element_bytes} B)")
        if self.buffer_bytes < self.dot_bytes:
            return (f"buffer_bytes = {self.buffer_bytes} B cannot hold one DOT's input "
                    f"({self.macs_per_bank} MACs x {self.element_bytes} B)")
        return None


def activate_cycles(g: PimGeometry, t: DramTiming) -> int:
    """Cycles from the first ACT command of a tile to the last one: four banks per command,
    one command per tFAW window (ranks open their banks in parallel)."""
    return (_cdiv(g.banks_per_rank, 4) - 1) * t.tfaw


def row_switch_cycles(g: PimGeometry, t: DramTiming) -> int:
    """Cycles a pass spends opening and closing the input vector's row before its tiles
    (``tRCD + tRP`` with a single row buffer per bank, else 0)."""
    return t.trcd + t.trp if g.gwrite_row_switch else 0


def tile_cycles(g: PimGeometry, t: DramTiming, dots: int) -> int:
    """Cycles of one tile: open a row in every bank, ``dots`` all-bank DOTs, precharge."""
    return activate_cycles(g, t) + max(t.trcd + dots * g.dot_cycles, t.tras) + t.trp


def gwrite_cycles(t: DramTiming, nbytes: float) -> int:
    """Cycles to write ``nbytes`` into a channel's global buffer (0 for nothing)."""
    if nbytes <= 0:
        return 0
    return t.cwl + _cdiv(nbytes, t.burst_bytes) * t.burst_cycles + t.twr


def readout_cycles(t: DramTiming, nbytes: float) -> int:
    """Cycles to read ``nbytes`` of results out of a channel (0 for nothing)."""
    if nbytes <= 0:
        return 0
    return t.cl + _cdiv(nbytes, t.burst_bytes) * t.burst_cycles


# ---------------------------------------------------------------------------------- GEMV
@dataclass(frozen=True)
class Gemv:
    """``vectors`` products of one ``rows x cols`` matrix with input vectors of ``cols``.

    ``segment``: reduction length of one output (``cols`` for a plain GEMV; the head size when
    one matrix row holds several heads, as a key row does). ``packed``: rows laid densely over
    pages (weights); otherwise every row starts a new page (the KV-cache layout of NeuPIMs).
    """

    rows: int
    cols: int
    vectors: int = 1
    segment: int = 0
    packed: bool = True


@dataclass(frozen=True)
class Stream:
    """The command stream of a GEMV on ``channels`` channels, counted in closed form.

    Per channel (every channel runs the same stream in parallel): ``passes`` GWRITE + tiles +
    RDRESULT rounds, ``tiles`` row openings of all banks, ``dots`` all-bank DOT commands,
    ``cycles`` latency including refresh. Totals over the device: ``bank_activations``,
    ``column_bytes`` read in-bank, ``macs``, ``gwrite_bytes`` and ``readout_bytes`` over the
    channels' buses.
    """

    channels: int
    passes: int
    tiles: int
    dots: int
    cycles: float
    bank_activations: int
    column_bytes: float
    macs: float
    gwrite_bytes: float
    readout_bytes: float
    gwrite_cycles: float
    tile_cycles: float
    readout_cycles: float


@lru_cache(maxsize=1 << 16)
def gemv_stream(g: PimGeometry, t: DramTiming, gemv: Gemv, channels: int | None = None) -> Stream:
    """Commands and latency of ``gemv`` partitioned over ``channels`` channels (default all).

    Partition: output rows spread over every bank of every channel (``ceil`` per bank, so an
    uneven split costs the busiest bank's time). When there are fewer rows than banks, the
    columns are split across channels instead (each channel has its own buffer; all banks of a
    channel read the same buffer slice, so columns cannot split within a channel), and the host
    adds the partial sums. A channel's slice of the input goes through its buffer in
    ``ceil(slice / buffer)`` chunks; if several input vectors fit, one tile serves them all.
    """
    channels = g.channels if channels is None else channels
    b = g.element_bytes
    bi, bo = g.input_bytes or b, g.output_bytes or b
    rows, cols, vectors = max(gemv.rows, 1), max(gemv.cols, 1), max(gemv.vectors, 1)
    segment = gemv.segment if gemv.segment > 0 else cols
    # columns split across channels only when the rows cannot fill the banks
    col_split = 1
    if rows < channels * g.banks:
        col_split = max(1, min(channels, (channels * g.banks) // rows,
                               _cdiv(cols, g.macs_per_bank)))
    per_piece = channels // col_split                    # channels sharing one column piece
    rows_per_channel = _cdiv(rows, per_piece)
    rows_per_bank = _cdiv(rows_per_channel, g.banks)
    piece = _cdiv(cols, col_split)                       # columns each channel reduces over
    chunk = int(max(min(piece, g.buffer_bytes // bi), 1))  # columns per buffer load
    chunks = _cdiv(piece, chunk)
    vec_per_pass = int(max(1, min(vectors, g.buffer_bytes // (chunk * bi))))
    vector_rounds = _cdiv(vectors, vec_per_pass)
    passes = chunks * vector_rounds

    # tiles and DOTs of one pass (one chunk of columns, up to vec_per_pass vectors)
    if gemv.packed:
        tiles_per_pass = int(_cdiv(rows_per_bank * chunk * b, g.page_bytes))
        dots_per_vector = _cdiv(rows_per_bank * chunk, g.macs_per_bank)
    else:
        tiles_per_pass = rows_per_bank * int(_cdiv(chunk * b, g.page_bytes))
        dots_per_vector = rows_per_bank * _cdiv(chunk, g.macs_per_bank)
    dots_per_pass = dots_per_vector * vec_per_pass
    # Sum over tiles of max(tRCD + dots_i * dot, tRAS): exact when tiles hold equal DOTs.
    open_cycles = max(tiles_per_pass * t.trcd + dots_per_pass * g.dot_cycles,
                      tiles_per_pass * t.tras)
    tiles_cycles = tiles_per_pass * (activate_cycles(g, t) + t.trp) + open_cycles

    gw_bytes_pass = vec_per_pass * chunk * bi
    segments = max(1, _cdiv(chunk, segment))
    rd_bytes_pass = rows_per_channel * segments * vec_per_pass * bo
    gw = gwrite_cycles(t, gw_bytes_pass) + row_switch_cycles(g, t)
    rd = readout_cycles(t, rd_bytes_pass)
    cycles = passes * (gw + tiles_cycles + rd) * t.refresh_factor

    tiles = passes * tiles_per_pass
    dots = passes * dots_per_pass
    return Stream(
        channels=channels, passes=passes, tiles=tiles, dots=dots, cycles=cycles,
        bank_activations=tiles * g.banks * channels,
        column_bytes=float(dots) * g.dot_bytes * g.banks * channels,
        macs=float(dots) * g.macs_per_bank * g.banks * channels,
        gwrite_bytes=float(passes * gw_bytes_pass * channels),
        readout_bytes=float(passes * rd_bytes_pass * channels),
        gwrite_cycles=passes * gw * t.refresh_factor,
        tile_cycles=passes * tiles_cycles * t.refresh_factor,
        readout_cycles=passes * rd * t.refresh_factor)


def bank_footprint_bytes(g: PimGeometry, gemv: Gemv, channels: int | None = None) -> int:
    """Bytes the busiest bank stores for ``gemv``'s matrix under :func:`gemv_stream`'s
    partition (pages rounded up), for capacity checks."""
    channels = g.channels if channels is None else channels
    b = g.element_bytes
    rows, cols = max(gemv.rows, 1), max(gemv.cols, 1)
    col_split = 1
    if rows < channels * g.banks:
        col_split = max(1, min(channels, (channels * g.banks) // rows,
                               _cdiv(cols, g.macs_per_bank)))
    rows_per_bank = _cdiv(_cdiv(rows, channels // col_split), g.banks)
    piece = _cdiv(cols, col_split)
    if gemv.packed:
        pages = int(_cdiv(rows_per_bank * piece * b, g.page_bytes))
    else:
        pages = rows_per_bank * int(_cdiv(piece * b, g.page_bytes))
    return pages * g.page_bytes


def stream_seconds(s: Stream, t: DramTiming) -> float:
    """Latency of ``s``, s."""
    return s.cycles * t.tck_s


def ceil_div(a: float, b: float) -> int:
    """``ceil(a / b)`` for positive numbers, as an int."""
    return _cdiv(a, b)




def add_streams(a: Stream, b: Stream) -> Stream:
    """``a`` then ``b`` on the same channels: latencies and counts add."""
    return Stream(channels=max(a.channels, b.channels), passes=a.passes + b.passes,
                  tiles=a.tiles + b.tiles, dots=a.dots + b.dots, cycles=a.cycles + b.cycles,
                  bank_activations=a.bank_activations + b.bank_activations,
                  column_bytes=a.column_bytes + b.column_bytes, macs=a.macs + b.macs,
                  gwrite_bytes=a.gwrite_bytes + b.gwrite_bytes,
                  readout_bytes=a.readout_bytes + b.readout_bytes,
                  gwrite_cycles=a.gwrite_cycles + b.gwrite_cycles,
                  tile_cycles=a.tile_cycles + b.tile_cycles,
                  readout_cycles=a.readout_cycles + b.readout_cycles)


def repeat_stream(s: Stream, rounds: float, copies: float | None = None) -> Stream:
    """``s`` run ``rounds`` times one after another, ``copies`` times in all (copies >= rounds
    when some run side by side on other channels): latency scales with ``rounds``, device
    totals with ``copies`` (default ``rounds``)."""
    copies = rounds if copies is None else copies
    return Stream(channels=s.channels, passes=int(s.passes * rounds), tiles=int(s.tiles * rounds),
                  dots=int(s.dots * rounds), cycles=s.cycles * rounds,
                  bank_activations=int(s.bank_activations * copies),
                  column_bytes=s.column_bytes * copies, macs=s.macs * copies,
                  gwrite_bytes=s.gwrite_bytes * copies, readout_bytes=s.readout_bytes * copies,
                  gwrite_cycles=s.gwrite_cycles * rounds, tile_cycles=s.tile_cycles * rounds,
                  readout_cycles=s.readout_cycles * rounds)


def block_stream(g: PimGeometry, t: DramTiming, gemv: Gemv, blocks: int,
                 channels: int | None = None) -> Stream:
    """``blocks`` independent GEMVs of one shape, each with its own input vector (one per
    attention head, say), spread over ``channels``: each block gets ``max(1, channels //
    blocks)`` channels, and ``ceil(blocks / concurrent)`` rounds run one after another."""
    channels = g.channels if channels is None else channels
    blocks = max(int(blocks), 1)
    per_block = max(1, channels // blocks)
    concurrent = max(1, channels // per_block)
    s = gemv_stream(g, t, gemv, per_block)
    return repeat_stream(s, _cdiv(blocks, concurrent), blocks)
