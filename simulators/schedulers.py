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
  prefills piggyback on decodes and never stall them [P Agrawal et al., OSDI 2024].
* :class:`StaticBatching` — the baseline: a batch of up to ``max_batch`` waiting requests is
  formed when the previous one is done, its prompts prefilled (whole prompts, iterations of at
  most the token budget), then decoded until its longest request finishes; finished requests
  keep their slot as padding and KV blocks are reserved for the whole output at admission.

KV cache: :class:`KVCache`, blocks of ``block_size`` tokens [P vLLM: PagedAttention, 16-token
blocks by default]. A request holds ``ceil(kv_tokens / block_size)`` blocks. Admission needs
the blocks of the prompt (plus vLLM's watermark: 1 % of the blocks kept free); a decode that
crosses a block boundary takes one more; when none is free the most recently admitted running
request is preempted by recompute: its blocks are freed, it goes back to the front of the queue
and later re-prefills its prompt and the tokens generated so far (vLLM's default for single
sequences).
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


@dataclass
class Batch:
    """One iteration: ``chunks`` of prefill ``(request, cached tokens, new tokens)``,
    ``decodes`` (request ids, one token each), and ``padding`` slots of a static batch that
    still compute (their KV tokens in ``padding_kv``)."""

    chunks: list[tuple[int, int, int]] = field(default_factory=list)
    decodes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    padding: int = 0
    padding_kv: int = 0


class KVCache:
    """``blocks`` blocks of ``block_size`` tokens; ``free`` of them unallocated."""

    def __init__(self, blocks: int, block_size: int):
        self.blocks, self.block_size, self.free = int(blocks), int(block_size), int(blocks)
        self.watermark = int(WATERMARK * blocks)

    def blocks_for(self, tokens: int) -> int:
        return -(-int(tokens) // self.block_size)


class State:
    """What the schedulers see and change: per-request arrays (tokens, KV, blocks), the
    waiting queue (a deque of ids), the requests prefilling (ids, admission order) and
    decoding (an id array, admission order)."""

    def __init__(self, input_len: np.ndarray, output_len: np.ndarray, kv: KVCache):
        n = len(input_len)
        self.input_len, self.output_len, self.kv = input_len, output_len, kv
        self.generated = np.zeros(n, dtype=np.int64)
        self.kv_tokens = np.zeros(n, dtype=np.int64)
        self.blocks = np.zeros(n, dtype=np.int64)
        self.prefill_left = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.waiting: deque[int] = deque()
        self.prefilling: list[int] = []
        self.decoding = np.zeros(0, dtype=np.int64)

    @property
    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    def prompt(self, r: int) -> int:
        """Tokens request ``r`` prefills when admitted: its prompt and what it has generated
        (recompute after a preemption)."""
        return int(self.input_len[r] + self.generated[r])

    def admit(self, r: int) -> None:
        """Take ``r`` from the front of the queue to prefilling (no blocks yet)."""
        self.waiting.popleft()
        self.prefill_left[r] = self.prompt(r)
        self.prefilling.append(r)

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
        """Preempt the most recently admitted decoding request (recompute): free its blocks,
        queue it first. False when none decodes."""
        if not len(self.decoding):
            return False
        r = int(self.decoding[-1])
        self.decoding = self.decoding[:-1]
        self._requeue(r)
        return True

    def preempt_prefilling(self) -> None:
        """Preempt the most recently admitted request still prefilling (recompute)."""
        self._requeue(self.prefilling.pop())

    def _requeue(self, r: int) -> None:
        """Free the blocks of ``r`` (no longer running), drop its KV, count the preemption
        and queue it first."""
        self.kv.free += int(self.blocks[r])
        self.blocks[r] = 0
        self.kv_tokens[r] = 0
        self.preemptions[r] += 1
        self.waiting.appendleft(r)

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
            need = s.kv.blocks_for(p)
            if need > s.kv.free - s.kv.watermark:
                break
            s.admit(r)
            s.grow(r, p)
            chunks.append((r, 0, p))
            tokens += p
        if chunks:
            return Batch(chunks)
        s.make_room_for_decodes()
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
        budget = self.token_budget - len(s.decoding)
        chunks = []
        for r in list(s.prefilling):
            if budget <= 0:
                break
            c = self._chunk(s, r, budget)
            if c:
                chunks.append((r, int(s.kv_tokens[r]), c))
                budget -= c
        while budget > 0 and s.waiting and s.running < self.max_batch:
            r = s.waiting[0]
            if s.kv.blocks_for(min(s.prompt(r), budget)) > s.kv.free - s.kv.watermark:
                break
            s.admit(r)
            c = self._chunk(s, r, budget)
            chunks.append((r, 0, c))
            budget -= c
        if not chunks and not len(s.decoding):
            if not s.prefilling:
                return None
            s.preempt_prefilling()     # partial prompts hold every block: restart the last
            return self.step(s)
        return Batch(chunks, s.decoding)

    @staticmethod
    def _chunk(s: State, r: int, budget: int) -> int:
        """Prompt tokens of ``r`` this iteration: what is left, within the budget and the
        free blocks (its blocks allocated)."""
        c = int(min(s.prefill_left[r], budget))
        room = (s.blocks[r] + s.kv.free) * s.kv.block_size - s.kv_tokens[r]
        c = int(max(0, min(c, room)))
        if c:
            s.grow(r, c)
        return c


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
            return Batch(decodes=m[~done], padding=len(pad),
                         padding_kv=int((s.input_len[pad] + self.steps).sum()))
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
