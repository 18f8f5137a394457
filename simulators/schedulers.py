"""Iteration-level schedulers of an LLM server, and the paged KV cache they share.

Every iteration the serving loop (:mod:`simulators.serving`) asks its scheduler for a
:class:`Batch`: prefill chunks and decodes to run together. A scheduler is a small class with
one method, ``step(state) -> Batch | None``; it may admit waiting requests (allocating their
KV blocks) and preempt running ones when blocks run out. Three are built in:

* :class:`ContinuousBatching` — Orca / vLLM (v0 default): iteration-level batching, prefill
  first: when waiting requests fit (batch slots, token budget, free blocks) the iteration runs
  their whole prompts; otherwise it runs one decode step of every running request
  [P Yu et al., Orca, OSDI 2022; P Kwon et al., vLLM, SOSP 2023].
* :class:`ChunkedPrefill` — Sarathi-Serve: every iteration runs all running decodes and fills
  the rest of a token budget with prompt chunks (unfinished prompts first, then new ones), so
  prefills piggyback on decodes and never stall them [P Agrawal et al., OSDI 2024]. A new
  request is admitted only when the blocks of its whole prompt are free, and they are
  reserved at admission, as Sarathi-Serve and vLLM's chunked prefill do [R
  microsoft/vidur ``SarathiReplicaScheduler._can_allocate_request``; R vLLM v0
  ``BlockSpaceManager.can_allocate``]: a partly prefilled prompt never waits for blocks.
* :class:`StaticBatching` — the baseline: a batch of up to ``max_batch`` waiting requests is
  formed when the previous one is done, its prompts prefilled (whole prompts, iterations of at
  most the token budget), then decoded until its longest request finishes; finished requests
  keep their slot as padding and KV blocks are reserved for the whole output at admission.

KV cache: :class:`KVCache`, blocks of ``block_size`` tokens [P vLLM: PagedAttention, 16-token
blocks by default]. A request holds ``ceil(kv_tokens / block_size)`` blocks. Admission needs
the blocks of the prompt (plus vLLM's watermark: 1 % of the blocks kept free); a decode that
crosses a block boundary takes one more; when none is free the most recently admitted running
request is preempted, as vLLM (v0) does [R vLLM ``Scheduler._preempt``, ``PreemptionMode``]:

* ``recompute`` (vLLM's default for single sequences): its blocks are freed, it goes back to
  the front of the queue and later re-prefills its prompt and the tokens generated so far;
* ``swap``: its blocks are copied to host memory over the device's host link (``swap_out``
  tokens of the batch; the serving loop charges the copy) and freed; swapped requests come
  back (``swap_in``, first come first served) before any new request is admitted, as soon as
  their blocks are free. Host swap space holds ``swap_blocks`` blocks (vLLM's ``swap_space``,
  4 GiB per device by default); a victim that does not fit there is recomputed (vLLM aborts
  the run instead).

Pipelines: with ``pp`` stages a replica keeps up to ``pp`` batches in flight; a request in
flight is in no other batch (:meth:`State.fly`, :meth:`State.land`) and cannot be preempted.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dse.errors import BadInput

#: Share of the KV blocks admission keeps free [D vLLM ``watermark`` = 0.01].
WATERMARK = 0.01
SCHEDULERS = ("continuous", "chunked", "static")
#: Preemption modes [R vLLM ``PreemptionMode``].
PREEMPTION = ("recompute", "swap")


@dataclass
class Batch:
    """One iteration: ``chunks`` of prefill ``(request, cached tokens, new tokens)``,
    ``decodes`` (request ids, one token each), and ``padding`` slots of a static batch that
    still compute (their KV tokens in ``padding_kv``, each slot's in ``padding_lens``);
    ``swap_out`` / ``swap_in``: KV tokens copied to / from host memory before it runs (filled
    in by the serving loop from :meth:`State.take_swaps`)."""

    chunks: list[tuple[int, int, int]] = field(default_factory=list)
    decodes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    padding: int = 0
    padding_kv: int = 0
    padding_lens: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    swap_out: int = 0
    swap_in: int = 0


class KVCache:
    """``blocks`` blocks of ``block_size`` tokens; ``free`` of them unallocated."""

    def __init__(self, blocks: int, block_size: int):
        self.blocks, self.block_size, self.free = int(blocks), int(block_size), int(blocks)
        self.watermark = int(WATERMARK * blocks)

    def blocks_for(self, tokens: int) -> int:
        return -(-int(tokens) // self.block_size)


class State:
    """What the schedulers see and change: per-request arrays (tokens, KV, blocks), the
    waiting queue (a deque of ids), the requests prefilling (ids, admission order), decoding
    (an id array, admission order) and swapped out (a deque), and how many are in flight in
    a pipeline. ``preemption``: ``recompute`` or ``swap`` (:data:`PREEMPTION`) with
    ``swap_blocks`` blocks of host swap space."""

    def __init__(self, input_len: np.ndarray, output_len: np.ndarray, kv: KVCache,
                 preemption: str = "recompute", swap_blocks: int = 0):
        n = len(input_len)
        self.input_len, self.output_len, self.kv = input_len, output_len, kv
        self.generated = np.zeros(n, dtype=np.int64)
        self.kv_tokens = np.zeros(n, dtype=np.int64)
        self.blocks = np.zeros(n, dtype=np.int64)
        self.prefill_left = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.swaps = np.zeros(n, dtype=np.int64)
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.decoding = np.zeros(0, dtype=np.int64)
        self.swapped: deque[int] = deque()
        self.flying = 0
        self.preemption, self.swap_blocks, self.swap_used = preemption, int(swap_blocks), 0
        self._swap_out = self._swap_in = 0

    @property
    def running(self) -> int:
        """Requests holding KV blocks on the device: prefilling, decoding, in flight."""
        return len(self.prefilling) + len(self.decoding) + self.flying

    def prompt(self, r: int) -> int:
        """Tokens request ``r`` prefills when admitted: its prompt and what it has generated
        (recompute after a preemption)."""
        return int(self.input_len[r] + self.generated[r])

    def admit(self, r: int) -> None:
        """Take ``r`` from the front of the queue to prefilling (no blocks yet)."""
        self.waiting.popleft()
        self.prefill_left[r] = self.prompt(r)
        self.prefilling.append(r)

    def can_admit(self, r: int) -> bool:
        """Whether the blocks of ``r``'s whole prompt are free beside the watermark, and no
        swapped request waits to come back first."""
        return not self.swapped and (self.kv.blocks_for(self.prompt(r))
                                     <= self.kv.free - self.kv.watermark)

    def grow(self, r: int, tokens: int) -> bool:
        """Allocate the blocks ``r`` needs to hold ``tokens`` more KV tokens; False (nothing
        allocated) when too few are free."""
        need = self.kv.blocks_for(self.kv_tokens[r] + tokens) - self.blocks[r]
        if need > self.kv.free:
            return False
        self.kv.free -= need
        self.blocks[r] += need
        return True

    def preempt_last(self) -> bool:
        """Preempt the most recently admitted decoding request (:data:`PREEMPTION`): swap
        it out where host space holds its blocks, else recompute. False when none decodes."""
        if not len(self.decoding):
            return False
        r = int(self.decoding[-1])
        self.decoding = self.decoding[:-1]
        b = int(self.blocks[r])
        if self.preemption == "swap" and self.swap_used + b <= self.swap_blocks:
            self.kv.free += b
            self.swap_used += b
            self._swap_out += int(self.kv_tokens[r])
            self.swaps[r] += 1
            self.swapped.append(r)
            return True
        self._requeue(r)
        return True

    def _requeue(self, r: int) -> None:
        """Free the blocks of ``r`` (no longer running), drop its KV, count the preemption
        and queue it first."""
        self.kv.free += int(self.blocks[r])
        self.blocks[r] = 0
        self.kv_tokens[r] = 0
        self.preemptions[r] += 1
        self.waiting.appendleft(r)

    def swap_in(self, max_running: int) -> None:
        """Bring swapped requests back (first come first served) while their blocks and the
        next token's fit beside the watermark; they decode in this iteration."""
        back = []
        while self.swapped and self.running + len(back) < max_running:
            r = self.swapped[0]
            need = self.kv.blocks_for(self.kv_tokens[r] + 1)
            if need > self.kv.free - self.kv.watermark:
                break
            self.swapped.popleft()
            self.swap_used -= int(self.blocks[r])
            self.blocks[r] = need
            self.kv.free -= need
            self._swap_in += int(self.kv_tokens[r])
            back.append(r)
        if back:
            self.decoding = np.concatenate([self.decoding, np.array(back, dtype=np.int64)])

    def take_swaps(self) -> tuple[int, int]:
        """KV tokens swapped out and in since the last call (the next batch copies them)."""
        out, self._swap_out, self._swap_in = (self._swap_out, self._swap_in), 0, 0
        return out

    def make_room_for_decodes(self) -> None:
        """Preempt (last admitted first) until the blocks the next decode step takes (one for
        each decoding request whose KV fills its last block) are free, then take them."""
        while len(self.decoding):
            d = self.decoding
            grow = d[self.kv_tokens[d] % self.kv.block_size == 0]
            if len(grow) <= self.kv.free:
                self.blocks[grow] += 1
                self.kv.free -= len(grow)
                return
            self.preempt_last()

    def fly(self, batch: Batch) -> None:
        """Take ``batch``'s requests out of prefilling and decoding while it is in flight in
        a pipeline (no other batch may hold them)."""
        ids = {r for r, _, _ in batch.chunks}
        if ids:
            self.prefilling = [r for r in self.prefilling if r not in ids]
        self.flying += len(ids) + len(batch.decodes)
        if len(batch.decodes):
            self.decoding = self.decoding[~np.isin(self.decoding, batch.decodes)]

    def land(self, prefilling: list[int], decoding: np.ndarray, flown: int) -> None:
        """Put the unfinished requests of a batch that left the pipeline back (in admission,
        i.e. arrival, order, as Vidur keeps them)."""
        self.flying -= flown
        if prefilling:
            self.prefilling = sorted(self.prefilling + prefilling)
        if len(decoding):
            self.decoding = np.sort(np.concatenate([self.decoding, decoding]))


class Scheduler:
    """Base class: ``max_batch`` requests running at most, ``token_budget`` tokens per
    iteration at most (a lone prompt longer than the budget runs alone unless chunked)."""

    name = "base"

    def __init__(self, max_batch: int = 256, token_budget: int = 2048):
        for key, v in (("max_batch", max_batch), ("token_budget", token_budget)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 20:
                raise BadInput(key, v, "expected an int in [1, 1048576]")
        self.max_batch, self.token_budget = max_batch, token_budget

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "max_batch": self.max_batch,
                "token_budget": self.token_budget}

    def step(self, s: State) -> Batch | None:  # pragma: no cover - interface
        raise NotImplementedError


class ContinuousBatching(Scheduler):
    """Orca / vLLM, prefill first (see the module docstring)."""

    name = "continuous"

    def step(self, s: State) -> Batch | None:
        chunks, tokens = [], 0
        while s.waiting and s.running < self.max_batch:
            r = s.waiting[0]
            p = s.prompt(r)
            if chunks and tokens + p > self.token_budget:
                break
            if not s.can_admit(r):
                break
            s.admit(r)
            s.grow(r, p)
            chunks.append((r, 0, p))
            tokens += p
        if chunks:
            return Batch(chunks)
        s.make_room_for_decodes()
        s.swap_in(self.max_batch)
        return Batch(decodes=s.decoding) if len(s.decoding) else None


class ChunkedPrefill(Scheduler):
    """Sarathi-Serve: decodes plus prompt chunks within the token budget."""

    name = "chunked"

    def __init__(self, max_batch: int = 256, token_budget: int = 512):
        super().__init__(max_batch, token_budget)
        if token_budget < max_batch:
            raise BadInput("token_budget", token_budget, f"expected at least max_batch = "
                           f"{max_batch} (every decode takes a token of the budget)")

    def step(self, s: State) -> Batch | None:
        s.make_room_for_decodes()
        s.swap_in(self.max_batch)
        budget = self.token_budget - len(s.decoding)
        chunks = []
        for r in s.prefilling:            # their whole prompts' blocks are reserved
            if budget <= 0:
                break
            c = int(min(s.prefill_left[r], budget))
            chunks.append((r, int(s.kv_tokens[r]), c))
            budget -= c
        while budget > 0 and s.waiting and s.running < self.max_batch:
            r = s.waiting[0]
            if not s.can_admit(r):
                break
            s.admit(r)
            s.grow(r, s.prompt(r))        # the whole prompt, reserved at admission
            c = int(min(s.prefill_left[r], budget))
            chunks.append((r, 0, c))
            budget -= c
        if not chunks and not len(s.decoding):
            return None
        return Batch(chunks, s.decoding)


class StaticBatching(Scheduler):
    """A fixed batch, prefilled together and decoded until its longest request ends."""

    name = "static"

    def __init__(self, max_batch: int = 256, token_budget: int = 2048):
        super().__init__(max_batch, token_budget)
        self.members: np.ndarray = np.zeros(0, dtype=np.int64)
        self.steps = 0

    def step(self, s: State) -> Batch | None:
        m = self.members
        if s.prefilling:                 # the batch's prompts, whole, within the budget
            chunks, tokens = [], 0
            for r in s.prefilling:
                p = int(s.prefill_left[r])
                if chunks and tokens + p > self.token_budget:
                    break
                chunks.append((r, 0, p))
                tokens += p
            return Batch(chunks)
        done = s.generated[m] >= s.output_len[m]
        if len(m) and not done.all():
            self.steps += 1
            pad = m[done]   # padding slots compute on, their KV growing in reserved blocks
            lens = s.input_len[pad] + self.steps
            return Batch(decodes=m[~done], padding=len(pad), padding_kv=int(lens.sum()),
                         padding_lens=lens)
        members = []
        while s.waiting and len(members) < self.max_batch:
            r = s.waiting[0]
            need = s.kv.blocks_for(s.prompt(r) + s.output_len[r] - s.generated[r])
            if need > s.kv.free:
                break
            s.admit(r)
            s.kv.free -= need
            s.blocks[r] = need
            members.append(r)
        self.members = np.array(members, dtype=np.int64)
        self.steps = 0
        return self.step(s) if members else None


def make_scheduler(name: str, max_batch: int = 256, token_budget: int | None = None
                   ) -> Scheduler:
    """A scheduler by name (``continuous``, ``chunked``, ``static``)."""
    classes = {"continuous": ContinuousBatching, "chunked": ChunkedPrefill,
               "static": StaticBatching}
    if name not in classes:
        raise BadInput("scheduler", name, "expected one of " + ", ".join(SCHEDULERS))
    cls = classes[name]
    return cls(max_batch) if token_budget is None else cls(max_batch, token_budget)
