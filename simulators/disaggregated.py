"""Disaggregated serving: a prefill pool and a decode pool joined by a link (DistServe,
Splitwise).

A request arrives at a prefill instance, whose iterations run whole prompts (first come, first
served, up to ``token_budget`` tokens and ``max_batch`` prompts an iteration, a lone longer
prompt alone) and emit each request's first token. Its KV cache then moves to a decode
instance over the link between the pools, and the decode instance runs one decode step of all
its requests per iteration until each has its output [P Zhong et al., DistServe, OSDI 2024,
Sec. 3; P Patel et al., Splitwise, ISCA 2024, Sec. 4]. Each pool is ``count`` instances of one
design or one system with its parallel layout (:class:`simulators.iteration_cost.Target`),
priced per iteration by its own :class:`~simulators.iteration_cost.IterationCostModel`.

The link is a :class:`simulators.channel.FluidChannel` of the link standard's sustained
bandwidth times the links between the pools (:mod:`accelerators.interconnect`): concurrent KV
transfers share it equally, and each pays the link's hop latency first. The simulation is a
SimPy model: instances and transfers are processes, so a transfer overlaps the iterations of
both pools and contends only with other transfers.

Memory: a prefill instance holds a request's KV blocks from its prefill until its transfer
ends; a decode instance reserves the blocks of the whole request (prompt and output) when it
accepts the transfer, so decodes are never preempted (a conservative reading of vLLM's paged
cache: it holds fewer blocks early in a request's life) [E]. A request that fits neither pool's
cache alone is rejected. Routing: a new request goes to the prefill instance with the fewest
prompt tokens queued or running; a prefilled one to the decode instance with the fewest
tokens reserved (ties to the lowest index).

Conservation (tested): every request's tokens are produced once (the first by prefill, the rest
one per decode step), and the bytes the link moved equal the KV bytes the prefill iterations
wrote for the requests that moved.
"""

from __future__ import annotations

import time as _time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import simpy

from accelerators.interconnect import LINK_STANDARDS, LinkStandard
from dse.errors import BadInput
from simulators.channel import FluidChannel
from simulators.iteration_cost import IterationCostModel
from simulators.replicas import Outcome, percentiles
from simulators.economics import Economics, run_usd
from simulators.serving import BLOCK_SIZE
from workloads.traces import Trace


def check_count(field_name: str, value: Any, low: int = 1, high: int = 4096) -> int:
    """``value`` as an instance count; one :class:`BadInput` line otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not low <= value <= high:
        what = "a pool of zero devices serves nothing" if value == 0 else ""
        raise BadInput(field_name, value, f"expected an int in [{low}, {high}]"
                       + (f" ({what})" if what else ""))
    return int(value)


@dataclass(frozen=True)
class KVLink:
    """The link between the pools: ``links`` parallel links of ``standard``
    (:data:`accelerators.interconnect.LINK_STANDARDS`)."""

    standard: LinkStandard
    links: int = 1

    @classmethod
    def of(cls, standard: str | LinkStandard, links: int = 1) -> "KVLink":
        if isinstance(standard, str):
            if standard not in LINK_STANDARDS:
                raise BadInput("link", standard, "expected a link standard: "
                               + ", ".join(LINK_STANDARDS))
            standard = LINK_STANDARDS[standard]
        return cls(standard, check_count("links", links, 1, 1024))

    @property
    def bandwidth_Bps(self) -> float:
        """Sustained bandwidth between the pools, B/s."""
        return self.standard.effective_Bps * self.links

    def describe(self) -> dict[str, Any]:
        return {"standard": self.standard.name, "links": self.links,
                "bandwidth_Bps": self.bandwidth_Bps, "latency_s": self.standard.latency_s,
                "energy_pj_per_bit": self.standard.energy_pj_per_bit}


@dataclass
class PoolModel:
    """``count`` instances priced by ``cost``; an iteration runs at most ``max_batch``
    requests and (prefill) ``token_budget`` prompt tokens."""

    cost: IterationCostModel
    count: int
    max_batch: int = 256
    token_budget: int = 2048

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes of one token on a whole instance (every device of a system)."""
        return self.cost.kv_bytes_per_token * self.cost.target.devices

    def describe(self) -> dict[str, Any]:
        t = self.cost.target
        return {"count": self.count, "devices_per_instance": t.devices,
                "max_batch": self.max_batch, "token_budget": self.token_budget,
                "target": t.describe()}


@dataclass
class DisaggregatedResult:
    """What a disaggregated run measured: the per-request :class:`Outcome`, the pools and the
    link as run, KV bytes written by prefill and moved by the link, per-request transfer time
    (s), the link's busy share of the run, devices in both pools."""

    outcome: Outcome
    prefill: dict[str, Any]
    decode: dict[str, Any]
    link: dict[str, Any]
    kv_bytes_written: float
    kv_bytes_transferred: float
    transfer_s: np.ndarray
    link_busy: float
    devices: int
    slo: dict[str, float | None]
    sim_wall_s: float = 0.0
    per_pool: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        s = self.outcome.summary(self.slo["ttft_s"], self.slo["tpot_s"])
        moved = self.transfer_s[~np.isnan(self.transfer_s)]
        s.update({"devices": self.devices,
                  "goodput_per_device_req_s": s["goodput_req_s"] / self.devices,
                  "kv_bytes_written": self.kv_bytes_written,
                  "kv_bytes_transferred": self.kv_bytes_transferred,
                  "kv_transfer_s": percentiles(moved), "link_busy": self.link_busy,
                  "prefill": self.prefill, "decode": self.decode, "link": self.link,
                  "pools": self.per_pool, "sim_wall_s": self.sim_wall_s})
        return s

    def to_dict(self) -> dict[str, Any]:
        return self.summary()

    def metrics(self) -> dict[str, float]:
        """Scalar metrics a study can optimise or constrain."""
        s = self.summary()
        return {"ttft_p99_s": s["ttft_s"]["p99"], "tpot_p99_s": s["tpot_s"]["p99"],
                "e2e_p99_s": s["e2e_s"]["p99"], "ttft_p50_s": s["ttft_s"]["p50"],
                "tpot_p50_s": s["tpot_s"]["p50"], "throughput_tok_s": s["throughput_tok_s"],
                "goodput_req_s": s["goodput_req_s"], "slo_attainment": s["slo_attainment"],
                "goodput_per_device_req_s": s["goodput_per_device_req_s"],
                "cost_per_mtok_usd": s["cost_per_mtok_usd"],
                "energy_per_token_j": s["energy_per_token_j"], "devices": float(self.devices),
                "kv_transfer_p99_s": s["kv_transfer_s"]["p99"],
                "rejected": float(s["rejected"])}


class _Instance:
    __slots__ = ("free", "blocks", "queue", "running", "pending", "wake", "load", "busy_s",
                 "energy_j", "iterations")

    def __init__(self, env: simpy.Environment, blocks: int):
        self.free = self.blocks = blocks
        self.queue: deque[int] = deque()          # prefill: waiting prompts
        self.running: list[int] = []               # decode: requests decoding
        self.pending: deque[tuple[int, int]] = deque()   # decode: (request, prefill instance)
        self.wake = env.event()
        self.load = 0                              # tokens queued or reserved
        self.busy_s = self.energy_j = 0.0
        self.iterations = 0


def _blocks(tokens: int, block_size: int) -> int:
    return -(-int(tokens) // block_size)


def simulate_disaggregated(prefill: PoolModel, decode: PoolModel, link: KVLink, trace: Trace,
                           slo_ttft_s: float | None = None, slo_tpot_s: float | None = None,
                           memory_utilization: float = 0.9, block_size: int = BLOCK_SIZE,
                           economics: Economics | None = None) -> DisaggregatedResult:
    """Serve ``trace`` on a prefill pool and a decode pool joined by ``link`` (see the module
    docstring)."""
    check_count("prefill.count", prefill.count)
    check_count("decode.count", decode.count)
    for key, v in (("slo_ttft_s", slo_ttft_s), ("slo_tpot_s", slo_tpot_s)):
        if v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                  and 0 < v < 1e9):
            raise BadInput(key, v, "expected a time > 0, s")
    longest = int(trace.input_len.max())
    for name, pool, need in (("prefill", prefill, max(prefill.token_budget, longest)),
                             ("decode", decode, decode.max_batch)):
        if need > pool.cost.max_tokens:
            raise BadInput(f"{name}.token_budget", need, "expected at most the cost model's "
                           f"{pool.cost.max_tokens} tokens per iteration")
    started = _time.perf_counter()
    env = simpy.Environment()
    channel = FluidChannel(env, link.bandwidth_Bps)
    p_blocks = prefill.cost.kv_capacity_tokens(memory_utilization) // block_size
    d_blocks = decode.cost.kv_capacity_tokens(memory_utilization) // block_size
    P = [_Instance(env, p_blocks) for _ in range(prefill.count)]
    D = [_Instance(env, d_blocks) for _ in range(decode.count)]
    n = len(trace)
    ins, outs, arrival = trace.input_len, trace.output_len, trace.arrival_s
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    generated = np.zeros(n, dtype=np.int64)
    served_by = np.full(n, -1, dtype=np.int64)
    transfer = np.full(n, np.nan)
    held = np.zeros(n, dtype=np.int64)             # prefill blocks held per request
    reserved = np.zeros(n, dtype=np.int64)         # decode blocks reserved per request
    kv_tok_p = prefill.kv_bytes_per_token
    acc = {"kv_written": 0.0, "kv_moved": 0.0, "transfers": 0}

    def wake(inst: _Instance) -> None:
        if not inst.wake.triggered:
            inst.wake.succeed()

    def sleep(inst: _Instance):
        yield inst.wake
        inst.wake = env.event()

    def source():
        for r in range(n):
            t = float(arrival[r])
            if t > env.now:
                yield env.timeout(t - env.now)
            if (_blocks(ins[r], block_size) > p_blocks
                    or _blocks(ins[r] + outs[r], block_size) > d_blocks):
                continue                                      # fits neither cache: rejected
            k = min(range(len(P)), key=lambda i: (P[i].load, i))
            P[k].queue.append(r)
            P[k].load += int(ins[r])
            wake(P[k])

    def prefill_instance(k: int):
        inst = P[k]
        while True:
            batch, tokens = [], 0
            while inst.queue and len(batch) < prefill.max_batch:
                r = inst.queue[0]
                p = int(ins[r])
                need = _blocks(p, block_size)
                if (batch and tokens + p > prefill.token_budget) or need > inst.free:
                    break
                inst.queue.popleft()
                inst.free -= need
                held[r] = need
                batch.append(r)
                tokens += p
            if not batch:
                yield from sleep(inst)        # nothing queued, or the head waits for blocks
                continue
            latency, e = prefill.cost.cost(0, 0, [(0, int(ins[r])) for r in batch])
            acc["kv_written"] += tokens * kv_tok_p
            inst.energy_j += e
            inst.busy_s += latency
            inst.iterations += 1
            yield env.timeout(latency)
            for r in batch:
                first[r] = env.now
                generated[r] = 1
                inst.load -= int(ins[r])
                if outs[r] <= 1:
                    finish[r] = env.now
                    served_by[r] = -2 - k          # finished on the prefill pool
                    inst.free += int(held[r])
                    held[r] = 0
                    continue
                j = min(range(len(D)), key=lambda i: (D[i].load, i))
                D[j].pending.append((r, k))
                D[j].load += int(ins[r] + outs[r])
                admit(j)

    def admit(j: int) -> None:
        inst = D[j]
        while inst.pending:
            r, k = inst.pending[0]
            need = _blocks(ins[r] + outs[r], block_size)
            if need > inst.free or len(inst.running) + _incoming[j] >= decode.max_batch:
                return
            inst.pending.popleft()
            inst.free -= need
            reserved[r] = need
            _incoming[j] += 1
            env.process(move(r, k, j))

    _incoming = [0] * len(D)

    def move(r: int, k: int, j: int):
        t0 = env.now
        nbytes = float(ins[r]) * kv_tok_p
        yield env.timeout(link.standard.latency_s)
        yield channel.transfer(nbytes)
        acc["kv_moved"] += nbytes
        acc["transfers"] += 1
        transfer[r] = env.now - t0
        P[k].free += int(held[r])
        held[r] = 0
        wake(P[k])
        _incoming[j] -= 1
        D[j].running.append(r)
        wake(D[j])

    def decode_instance(j: int):
        inst = D[j]
        while True:
            if not inst.running:
                yield from sleep(inst)
                continue
            batch = np.array(inst.running, dtype=np.int64)
            lens = ins[batch] + generated[batch]
            latency, e = decode.cost.cost(len(batch), int(lens.sum()), kv_lens=(
                lens if decode.cost.per_request else None))
            inst.energy_j += e
            inst.busy_s += latency
            inst.iterations += 1
            yield env.timeout(latency)
            generated[batch] += 1
            ended = batch[generated[batch] >= outs[batch]]
            if len(ended):
                gone = set(int(r) for r in ended)
                inst.running = [r for r in inst.running if r not in gone]
                for r in ended:
                    finish[r] = env.now
                    served_by[r] = j
                    inst.free += int(reserved[r])
                    inst.load -= int(ins[r] + outs[r])
                    reserved[r] = 0
                admit(j)

    env.process(source())
    for k in range(len(P)):
        env.process(prefill_instance(k))
    for j in range(len(D)):
        env.process(decode_instance(j))
    env.run()
    out = Outcome(arrival, ins, outs, first, finish, generated, served_by)
    span = out.span_s
    static = (prefill.cost.static_w * prefill.count + decode.cost.static_w * decode.count)
    link_j = acc["kv_moved"] * link.standard.energy_j_per_byte
    dyn = sum(i.energy_j for i in P) + sum(i.energy_j for i in D)
    out.energy_j = dyn + static * span + link_j
    capital = (prefill.count * prefill.cost.target.cost_usd()
               + decode.count * decode.cost.target.cost_usd()
               + link.links * link.standard.price_usd)
    devices = (prefill.count * prefill.cost.target.devices
               + decode.count * decode.cost.target.devices)
    out.usd = run_usd(economics or Economics(), capital, out.energy_j, span, devices)

    def pool_stats(instances: list[_Instance]) -> dict[str, Any]:
        return {"busy": [i.busy_s / span if span > 0 else 0.0 for i in instances],
                "iterations": [i.iterations for i in instances],
                "kv_blocks": instances[0].blocks}

    return DisaggregatedResult(
        outcome=out, prefill=prefill.describe(), decode=decode.describe(),
        link=link.describe(), kv_bytes_written=acc["kv_written"],
        kv_bytes_transferred=channel.bytes_moved, transfer_s=transfer,
        link_busy=channel.busy_s / span if span > 0 else 0.0, devices=devices,
        slo={"ttft_s": slo_ttft_s, "tpot_s": slo_tpot_s},
        sim_wall_s=_time.perf_counter() - started,
        per_pool={"prefill": pool_stats(P), "decode": pool_stats(D),
                  "link_energy_j": link_j, "transfers": acc["transfers"]})
