"""Collectives as pure cost functions on a :class:`~accelerators.topology.Topology`.

An algorithm is a list of *phases*; a phase is ``steps`` sequential steps and the bytes it
puts on each directed link (summed over its steps, found by routing each message with
:meth:`Topology.route`). Its time, in protocol ``p`` (:data:`interconnect.PROTOCOLS`), is the
alpha-beta model every collective simulator uses (ASTRA-sim, NCCL's own tuner):

    t = start-up(p) + sum over phases [ steps x (step latency(p) + extra hops x hop latency)
                                        + max over links (bytes / rate(link, p)) ]

with ``rate = min(effective bandwidth x protocol share, protocol cap)``. Contention inside a
collective is the max over links of the summed load; contention *between* collectives is the
simulator's job (it replays :attr:`CollectiveCost.phases` on shared link channels).

``nbytes`` follows nccl-tests: the buffer of an all-reduce or broadcast, the *output* of an
all-gather, the *input* of a reduce-scatter, each device's send buffer of an all-to-all, the
message of a send/recv. ``bus_bandwidth_Bps`` is nccl-tests' ``busbw``: ``nbytes / time``
times ``2 (p-1) / p`` (all-reduce), ``(p-1) / p`` (all-gather, reduce-scatter, all-to-all) or
1 (broadcast, send/recv).

Algorithms (``auto`` takes the fastest the topology offers; ``nccl`` only NCCL's):
``ring`` (two counter-rotating rings, half the data each), ``tree`` (two binary trees, half
each), ``direct`` (one step: every device sends its share straight to every peer; an
all-reduce then reduces locally: one-shot), ``two_shot`` (direct reduce-scatter, then direct
all-gather), ``switch_reduce`` (NVLink SHARP: the switch reduces and multicasts; switches that
reduce only), ``torus`` (dimension by dimension rings over a whole mesh / torus),
``hierarchical`` (reduce-scatter in each node, all-reduce across nodes, all-gather in each
node; ``two_level`` only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

from accelerators.collective_calibration import efficiency, issued
from accelerators.interconnect import PROTOCOLS
from accelerators.topology import Topology
from dse.errors import BadInput

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
#: Collectives that add data as they go (protocol shares for reductions apply).
REDUCING = ("all_reduce", "reduce_scatter")
ALGORITHMS = ("ring", "tree", "direct", "two_shot", "switch_reduce", "torus", "hierarchical")
#: Algorithms NCCL runs (``algorithm="nccl"``).
NCCL_ALGORITHMS = ("ring", "tree", "switch_reduce")
#: Which algorithms each collective has.
OFFERED = {
    "all_reduce": ALGORITHMS,
    "all_gather": ("ring", "direct", "torus"),
    "reduce_scatter": ("ring", "direct", "torus"),
    "all_to_all": ("direct",),
    "broadcast": ("ring", "tree"),
    "send_recv": ("direct",),
}


@dataclass(frozen=True)
class CollectiveCost:
    """One collective on one topology: its time (s) split into latency (start-up and steps)
    and bandwidth terms, the algorithm and protocol it ran, the bytes on each directed link,
    the phases the simulator replays (each: its latency, s, and wire-equivalent bytes per link
    at the link's effective bandwidth), energy (J) and nccl-tests' bandwidths (B/s)."""

    kind: str
    algorithm: str
    protocol: str
    nbytes: float
    devices: int
    time_s: float
    latency_s: float
    bandwidth_s: float
    link_bytes: dict[str, float]
    phases: tuple[tuple[float, dict[str, float]], ...] = ()
    start_s: float = 0.0
    energy_j: float = 0.0

    @property
    def algbw_Bps(self) -> float:
        return self.nbytes / self.time_s if self.time_s > 0 else math.inf

    @property
    def bus_bandwidth_Bps(self) -> float:
        return self.algbw_Bps * bus_factor(self.kind, self.devices)

    def to_dict(self) -> dict:
        return {"collective": self.kind, "algorithm": self.algorithm, "protocol": self.protocol,
                "bytes": self.nbytes, "devices": self.devices, "time_s": self.time_s,
                "latency_s": self.latency_s, "bandwidth_s": self.bandwidth_s,
                "algbw_Bps": self.algbw_Bps, "bus_bandwidth_Bps": self.bus_bandwidth_Bps,
                "energy_j": self.energy_j,
                "max_link_bytes": max(self.link_bytes.values(), default=0.0)}


def bus_factor(kind: str, p: int) -> float:
    """nccl-tests' bus-bandwidth factor of a collective on ``p`` devices."""
    if p <= 1:
        return 1.0
    if kind == "all_reduce":
        return 2 * (p - 1) / p
    if kind in ("all_gather", "reduce_scatter", "all_to_all"):
        return (p - 1) / p
    return 1.0


@dataclass
class _Phase:
    """``steps`` sequential steps and the bytes they put on each link; ``fixed_latency_s``
    replaces the protocol's start-up and step latencies (an in-switch reduction), and
    ``protocols`` limits the protocols it runs in."""

    steps: int
    loads: dict[str, float] = field(default_factory=dict)
    hops: int = 1
    fixed_latency_s: float | None = None
    protocols: tuple[str, ...] | None = None

    def send(self, topo: Topology, src: int, dst: int, nbytes: float) -> None:
        if src == dst or nbytes <= 0:
            return
        path = topo.route(src, dst)
        self.hops = max(self.hops, sum(1 for link in path if link.split("->")[1][0] == "d"))
        for link in path:
            self.loads[link] = self.loads.get(link, 0.0) + nbytes


# ------------------------------------------------------------------------------ algorithms
def _ring_phase(topo: Topology, order: Sequence[int], steps: int, per_device: float) -> _Phase:
    """``per_device`` bytes leave each device over ``steps`` steps on two counter-rotating
    rings through ``order`` (half each way)."""
    ph = _Phase(steps)
    p = len(order)
    for k, dev in enumerate(order):
        ph.send(topo, dev, order[(k + 1) % p], per_device / 2)
        ph.send(topo, dev, order[(k - 1) % p], per_device / 2)
    return ph


def _direct_phase(topo: Topology, group: Sequence[int], steps: int, per_peer: float) -> _Phase:
    ph = _Phase(steps)
    for a in group:
        for b in group:
            ph.send(topo, a, b, per_peer)
    return ph


def _tree_phases(topo: Topology, group: Sequence[int], nbytes: float, down_only: bool) -> list:
    """Two binary trees (the second over the reversed order), half the data each: reduce up
    then broadcast down (``down_only``: broadcast)."""
    p = len(group)
    depth = max(1, math.ceil(math.log2(p + 1)) - 1) if p > 1 else 0
    up, down = _Phase(depth), _Phase(depth)
    for order in (list(group), list(reversed(group))):
        for k in range(1, p):
            parent, child = order[(k - 1) // 2], order[k]
            up.send(topo, child, parent, nbytes / 2)
            down.send(topo, parent, child, nbytes / 2)
    return [down] if down_only else [up, down]


def _switch_reduce_phases(topo: Topology, group: Sequence[int], nbytes: float) -> list:
    """NVLink SHARP all-reduce: each device's ``1/p`` chunk is reduced in the switch (the
    switch reads it from every device, sends the sum to its owner), then multicast back: each
    port carries ``S + S/p`` each way. NCCL runs it in its simple protocol only, with a
    latency of its own (:attr:`SwitchChip.reduce_latency_s`)."""
    ph = _Phase(2, fixed_latency_s=topo.switch.reduce_latency_s, protocols=("simple",))
    for d in group:
        ph.loads[f"d{d}->sw"] = nbytes * (1 + 1 / len(group))
        ph.loads[f"sw->d{d}"] = nbytes * (1 + 1 / len(group))
    return [ph]


def _torus_phases(topo: Topology, nbytes: float, kind: str) -> list:
    """Bidirectional rings along one dimension at a time (reduce-scatter over x, then y,
    ..., then all-gather back for an all-reduce), run as ``N`` concurrent schedules on
    ``1/N`` of the data each, schedule ``r`` starting at dimension ``r``: every phase keeps
    all ``2N`` links of each device busy."""
    dims = [k for k, s in enumerate(topo.shape) if s > 1]
    n = len(dims)
    rs = [_Phase(0) for _ in dims]
    for r in range(n):
        chunk = nbytes / n
        for j in range(n):
            k = dims[(r + j) % n]
            size = topo.shape[k]
            ph = rs[j]
            ph.steps = max(ph.steps, size - 1)
            for ring in _dimension_rings(topo, k):
                sub = _ring_phase(topo, ring, size - 1, chunk * (size - 1) / size)
                for link, b in sub.loads.items():
                    ph.loads[link] = ph.loads.get(link, 0.0) + b
                ph.hops = max(ph.hops, sub.hops)
            chunk /= size
    if kind == "all_reduce":
        return rs + rs[::-1]
    return rs if kind == "reduce_scatter" else rs[::-1]


def _dimension_rings(topo: Topology, k: int) -> list[tuple[int, ...]]:
    rings, seen = [], set()
    for i in range(topo.devices):
        c = topo.coords(i)
        key = c[:k] + c[k + 1:]
        if key in seen:
            continue
        seen.add(key)
        rings.append(tuple(topo.index(c[:k] + (x,) + c[k + 1:]) for x in range(topo.shape[k])))
    return rings


def _hierarchical_phases(topo: Topology, group: Sequence[int], nbytes: float) -> list:
    """Reduce-scatter in each node, all-reduce of each ``1/g`` share across nodes among the
    devices of the same local rank, all-gather in each node."""
    nodes: dict[int, list[int]] = {}
    for d in group:
        nodes.setdefault(topo.node_of(d), []).append(d)
    local = len(next(iter(nodes.values())))
    n = len(nodes)
    inner = nbytes * (local - 1) / local
    rs, ag = _Phase(local - 1), _Phase(local - 1)
    for members in nodes.values():
        for ph in (rs, ag):
            sub = _ring_phase(topo, members, local - 1, inner)
            for link, b in sub.loads.items():
                ph.loads[link] = ph.loads.get(link, 0.0) + b
    across = _Phase(2 * (n - 1))
    share = nbytes / local
    for r in range(local):
        ring = [members[r] for members in nodes.values()]
        sub = _ring_phase(topo, ring, 2 * (n - 1), 2 * share * (n - 1) / n)
        for link, b in sub.loads.items():
            across.loads[link] = across.loads.get(link, 0.0) + b
        across.hops = max(across.hops, sub.hops)
    return [ph for ph in (rs, across, ag) if ph.steps > 0]


def _phases(topo: Topology, kind: str, algorithm: str, group: tuple[int, ...],
            nbytes: float) -> list[_Phase] | None:
    """The phases of ``algorithm`` for ``kind``, or None where it does not apply."""
    p = len(group)
    order = topo.ring_order(group)
    if kind == "send_recv":
        ph = _Phase(1)
        ph.send(topo, group[0], group[-1], nbytes)
        return [ph]
    if algorithm == "ring":
        if kind == "all_reduce":
            return [_ring_phase(topo, order, 2 * (p - 1), 2 * nbytes * (p - 1) / p)]
        if kind in ("all_gather", "reduce_scatter"):
            return [_ring_phase(topo, order, p - 1, nbytes * (p - 1) / p)]
        if kind == "broadcast":   # a pipelined chain from the root
            ph = _Phase(p - 1)
            for k in range(p - 1):
                ph.send(topo, order[k], order[k + 1], nbytes)
            return [ph]
    if algorithm == "tree" and kind in ("all_reduce", "broadcast"):
        if topo.kind == "switch":
            return None   # inside one switch NCCL's tree is a chain: the ring is the model
        return _tree_phases(topo, order, nbytes, kind == "broadcast")
    if algorithm == "direct":
        if kind == "all_reduce":
            return [_direct_phase(topo, group, 1, nbytes)]
        if kind in ("all_gather", "reduce_scatter", "all_to_all"):
            return [_direct_phase(topo, group, 1, nbytes / p)]
    if algorithm == "two_shot" and kind == "all_reduce":
        return [_direct_phase(topo, group, 2, 2 * nbytes / p)]
    if algorithm == "switch_reduce" and kind == "all_reduce":
        if topo.kind == "switch" and topo.switch is not None and topo.switch.reduces:
            return _switch_reduce_phases(topo, group, nbytes)
        return None
    if algorithm == "torus" and kind in ("all_reduce", "all_gather", "reduce_scatter"):
        if topo.kind in ("mesh", "torus") and len(group) == topo.devices:
            return _torus_phases(topo, nbytes, kind)
        return None
    if algorithm == "hierarchical" and kind == "all_reduce":
        if topo.kind == "two_level":
            counts = {}
            for d in group:
                counts[topo.node_of(d)] = counts.get(topo.node_of(d), 0) + 1
            if len(counts) > 1 and len(set(counts.values())) == 1:
                return _hierarchical_phases(topo, group, nbytes)
        return None
    return None


# ------------------------------------------------------------------------------ costing
def _time(topo: Topology, kind: str, phases: list[_Phase], protocol: str,
          algorithm: str = "", devices: int = 1):
    """(total s, latency s, bandwidth s, replay phases) of ``phases`` in ``protocol``, or
    None when a link on the way does not offer the protocol. Each link's rate is scaled by
    the measured efficiency of ``algorithm`` on its standard
    (:func:`accelerators.collective_calibration.efficiency`; 1 where none was measured)."""
    proto = PROTOCOLS[protocol]
    share = proto.reduce_fraction if kind in REDUCING else proto.copy_fraction
    links = topo.links
    start = 0.0
    latency = bandwidth = 0.0
    replay = []
    for ph in phases:
        used = [links[name] for name in ph.loads]
        if not used:
            continue
        if ph.protocols is not None and protocol not in ph.protocols:
            return None
        if ph.fixed_latency_s is not None:
            step_total = ph.fixed_latency_s
        else:
            lat = []
            for link in used:
                table = link.standard.protocols
                if protocol not in table:
                    return None
                lat.append(table[protocol])
            start = max(start, max(s for s, _ in lat))
            step = max(t for _, t in lat) + (ph.hops - 1) * max(link.latency_s for link in used)
            step_total = ph.steps * step
        wire: dict[str, float] = {}
        slowest = 0.0
        for link in used:
            rate = link.effective_Bps * share * efficiency(link.standard.name, kind, algorithm,
                                                          devices)
            if proto.max_device_Bps is not None:
                rate = min(rate, proto.max_device_Bps)
            t = ph.loads[link.name] / rate
            slowest = max(slowest, t)
            wire[link.name] = t * link.effective_Bps   # bytes at the channel's bandwidth
        latency += step_total
        bandwidth += slowest
        replay.append((step_total, wire))
    return start + latency + bandwidth, start + latency, bandwidth, tuple(replay), start


def collective_cost(topo: Topology, kind: str, nbytes: float,
                    group: Sequence[int] | None = None, algorithm: str = "auto",
                    protocol: str = "auto", call: str = "device") -> CollectiveCost:
    """The cost of collective ``kind`` of ``nbytes`` over ``group`` (device indices; default
    every device) of ``topo``. ``algorithm``: one of :data:`ALGORITHMS`, ``auto`` (the
    fastest that applies) or ``nccl`` (the fastest of NCCL's); ``protocol``: ``ll``,
    ``ll128``, ``simple`` or ``auto`` (the fastest the links offer); ``call``: how it is
    issued (:data:`accelerators.collective_calibration.MODES`: ``device`` time alone, or
    from PyTorch eager / a CUDA graph, back to back or one call, with the measured per-call
    latency of the link)."""
    if kind not in KINDS:
        raise BadInput("collective", kind, "expected one of " + ", ".join(KINDS))
    if not (isinstance(nbytes, (int, float)) and math.isfinite(nbytes) and nbytes >= 0):
        raise BadInput("bytes", nbytes, "expected a number of bytes >= 0")
    group = tuple(range(topo.devices)) if group is None else tuple(int(g) for g in group)
    if not group or len(set(group)) != len(group) or min(group) < 0 or max(group) >= topo.devices:
        raise BadInput("group", list(group)[:8], f"expected distinct devices in "
                       f"0..{topo.devices - 1}")
    if kind == "send_recv" and len(group) != 2:
        raise BadInput("group", list(group), "expected [source, destination] for send_recv")
    p = len(group)
    if algorithm in ("auto", "nccl"):
        candidates = [a for a in OFFERED[kind]
                      if algorithm == "auto" or a in NCCL_ALGORITHMS or kind in ("all_to_all",
                                                                                 "send_recv")]
    elif algorithm in OFFERED[kind]:
        candidates = [algorithm]
    else:
        raise BadInput("algorithm", algorithm, f"expected auto, nccl or one of "
                       + ", ".join(OFFERED[kind]) + f" for {kind}")
    protocols = list(PROTOCOLS) if protocol == "auto" else [protocol]
    if protocol != "auto" and protocol not in PROTOCOLS:
        raise BadInput("protocol", protocol, "expected auto or one of " + ", ".join(PROTOCOLS))
    if p == 1 or nbytes == 0:
        return CollectiveCost(kind, candidates[0], protocols[0], float(nbytes), p, 0.0, 0.0,
                              0.0, {})
    best = None
    for alg in candidates:
        phases = _phases(topo, kind, alg, group, float(nbytes))
        if phases is None:
            continue
        loads: dict[str, float] = {}
        for ph in phases:
            for link, b in ph.loads.items():
                loads[link] = loads.get(link, 0.0) + b
        for proto in protocols:
            got = _time(topo, kind, phases, proto, alg, p)
            if got is None:
                continue
            total, lat, bw, replay, start = got
            if best is None or total < best[0] - 1e-15:
                best = (total, lat, bw, replay, start, alg, proto, loads)
    if best is None:
        raise BadInput("algorithm", algorithm, f"expected an algorithm and protocol that "
                       f"{kind} can run on a {topo.kind} of {topo.link.name} links")
    total, lat, bw, replay, start, alg, proto, loads = best
    energy = sum(b * topo.links[name].energy_j_per_byte for name, b in loads.items())
    if call != "device":
        t = issued(total, topo.link.name, call)
        lat, total = lat + max(0.0, t - total), t
    return CollectiveCost(kind, alg, proto, float(nbytes), p, total, lat, bw, loads, replay,
                          start, energy)
