"""A shared-bandwidth channel for SimPy: concurrent transfers share it equally (fluid model).

Each active transfer gets ``bandwidth / n`` while ``n`` transfers are active, so two transfers
of B1 and B2 bytes started together both finish by (B1 + B2) / bandwidth, and a lone transfer of
B bytes takes B / bandwidth. Events: one timer per change of the active set.
"""

from __future__ import annotations

import math

import simpy


class FluidChannel:
    """A memory channel or link of ``bandwidth_Bps`` bytes per second."""

    __slots__ = ("env", "bandwidth_Bps", "_active", "_last_s", "_generation", "bytes_moved",
                 "busy_s", "_busy_since")

    def __init__(self, env: simpy.Environment, bandwidth_Bps: float):
        if not bandwidth_Bps > 0:
            raise ValueError(f"channel bandwidth must be positive, got {bandwidth_Bps}")
        self.env = env
        self.bandwidth_Bps = float(bandwidth_Bps)
        self._active: list[list] = []  # [remaining_bytes, initial_bytes, event]
        self._last_s = 0.0
        self._generation = 0
        self.bytes_moved = 0.0
        self.busy_s = 0.0
        self._busy_since: float | None = None

    def transfer(self, nbytes: float) -> simpy.Event:
        """An event that fires when ``nbytes`` have crossed the channel."""
        ev = self.env.event()
        if nbytes <= 0:
            ev.succeed()
            return ev
        self._advance()
        if not self._active:
            self._busy_since = self.env.now
        self._active.append([float(nbytes), float(nbytes), ev])
        self.bytes_moved += nbytes
        self._schedule()
        return ev

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self._last_s
        if dt > 0 and self._active:
            moved = dt * self.bandwidth_Bps / len(self._active)
            for a in self._active:
                a[0] -= moved
        self._last_s = now

    def _schedule(self) -> None:
        self._generation += 1
        if not self._active:
            return
        rate = self.bandwidth_Bps / len(self._active)
        # At least two float steps of the clock, so a sliver of bytes whose transfer time is
        # below the clock's resolution still advances time (and then finishes).
        delay = max(min(a[0] for a in self._active) / rate, 2.0 * math.ulp(self.env.now))
        generation = self._generation
        self.env.timeout(delay).callbacks.append(lambda _e: self._on_timer(generation))

    def _on_timer(self, generation: int) -> None:
        if generation != self._generation:
            return  # the active set changed since this timer was set
        self._advance()
        still = []
        for a in self._active:
            if a[0] <= 1e-9 * a[1] + 1e-9 or a[0] <= 0.0:
                a[2].succeed()
            else:
                still.append(a)
        self._active = still
        if not still and self._busy_since is not None:
            self.busy_s += self.env.now - self._busy_since
            self._busy_since = None
        self._schedule()
