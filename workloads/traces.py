"""Request traces for serving: when each request arrives and how long its prompt and output are.

A :class:`Trace` is three arrays (arrival time s, input tokens, output tokens), sorted by
arrival. It comes from

* :func:`synthetic_trace`: lengths from a :class:`workloads.requests.LengthDistribution`
  (``sharegpt``: means 80 in / 296 out; ``alpaca``: 12 / 56) and arrivals from a process:
  ``poisson`` (exponential gaps at ``rate`` requests/s) or ``gamma`` (gamma gaps of the same
  mean with coefficient of variation ``cv``: ``cv > 1`` is bursty, as in the ``--burstiness``
  of vLLM's benchmark_serving, which draws gamma gaps of shape ``1 / cv^2``);
  deterministic for a seed;
* :func:`read_csv_trace`: a CSV file with a header naming ``arrival_s`` (or ``timestamp``),
  ``input_len`` and ``output_len`` columns, one request per row.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dse.errors import BadInput
from dse.safe_io import read_regular
from workloads.requests import DISTRIBUTIONS, distribution

ARRIVALS = ("poisson", "gamma")
#: Most requests a trace may hold [E: 10 million requests take ~250 MB of arrays].
MAX_REQUESTS = 10_000_000
#: Largest CSV trace read, bytes (room for MAX_REQUESTS rows of ~25 characters).
MAX_TRACE_BYTES = 256 * 2**20
#: Longest request, tokens (prompt + output).
MAX_TOKENS = 1 << 20


@dataclass(frozen=True)
class Trace:
    """``arrival_s`` (s, non-decreasing), ``input_len`` and ``output_len`` (tokens >= 1), one
    entry per request; ``name`` says where it came from."""

    name: str
    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def rate(self) -> float:
        """Mean arrival rate over the trace, requests/s."""
        span = float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0
        return (len(self) - 1) / span if span > 0 else float("inf")


def _positive(name: str, value, kind: type = float, high: float = math.inf):
    ok = (not isinstance(value, bool) and isinstance(value, (int, float))
          and (kind is float or float(value).is_integer()) and math.isfinite(value)
          and 0 < value <= high)
    if not ok:
        what = "an int" if kind is int else "a number"
        raise BadInput(name, value, f"expected {what} > 0" + (
            f" and <= {high:g}" if math.isfinite(high) else ""))


def synthetic_trace(lengths: str, rate: float, requests: int | None = None,
                    duration_s: float | None = None, arrival: str = "poisson",
                    cv: float = 1.0, seed: int = 0) -> Trace:
    """``requests`` requests (or as many as arrive in ``duration_s``) with lengths from the
    distribution named ``lengths`` and arrivals at ``rate`` requests/s from ``arrival``."""
    dist = distribution(lengths) if isinstance(lengths, str) else lengths
    _positive("rate", rate, high=1e9)
    if arrival not in ARRIVALS:
        raise BadInput("arrival", arrival, "expected one of " + ", ".join(ARRIVALS))
    _positive("cv", cv, high=100)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise BadInput("seed", seed, "expected an int in [0, 2**63)")
    if (requests is None) == (duration_s is None):
        raise BadInput("requests", requests, "expected requests or duration_s (one of them)")
    if requests is not None:
        _positive("requests", requests, int, MAX_REQUESTS)
        n = int(requests)
    else:
        _positive("duration_s", duration_s, high=1e9)
        n = int(min(MAX_REQUESTS, math.ceil(rate * duration_s * 1.5 + 10 * math.sqrt(
            rate * duration_s) + 10)))
    rng = np.random.default_rng(seed)
    if arrival == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    else:
        shape = 1.0 / cv ** 2
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    t = np.cumsum(gaps)
    t -= t[0]                       # the first request arrives at 0
    ins, outs = dist.sample(n, rng)
    if duration_s is not None:
        keep = _arrived_before(t, duration_s)
        t, ins, outs = t[:keep], ins[:keep], outs[:keep]
    return Trace(f"{dist.name}@{rate:g}/s {arrival}", t, ins.astype(np.int64),
                 outs.astype(np.int64))


def read_csv_trace(path: str | Path) -> Trace:
    """The trace in the CSV file ``path`` (see the module docstring); one :class:`BadInput`
    line naming the row and column for anything malformed."""
    p = Path(path)
    blob = read_regular(p, "trace", MAX_TRACE_BYTES, "sharegpt, alpaca or a CSV file")
    rows_t, rows_i, rows_o = [], [], []
    try:
        with io.StringIO(blob.decode("utf-8"), newline="") as f:
            reader = csv.DictReader(f)
            cols = [c.strip() for c in reader.fieldnames or []]
            twice = sorted({c for c in cols if cols.count(c) > 1})
            if twice:
                raise BadInput(f"{p.name} header", ",".join(cols), "expected each column once "
                               f"({', '.join(twice)} appears more than once)")
            time_col = next((c for c in ("arrival_s", "timestamp") if c in cols), None)
            if time_col is None or "input_len" not in cols or "output_len" not in cols:
                raise BadInput(f"{p.name} header", _shown_header(cols),
                               "expected columns arrival_s (or timestamp), input_len, output_len")
            reader.fieldnames = cols
            for line, row in enumerate(reader, start=2):
                if len(rows_t) >= MAX_REQUESTS:
                    raise BadInput(f"{p.name}", len(rows_t), f"expected at most {MAX_REQUESTS:,} "
                                   "requests")
                rows_t.append(_cell(p, line, row, time_col, float))
                rows_i.append(_cell(p, line, row, "input_len", int))
                rows_o.append(_cell(p, line, row, "output_len", int))
    except UnicodeDecodeError:
        raise BadInput("trace", str(path), "expected a UTF-8 CSV file") from None
    except csv.Error as exc:
        raise BadInput("trace", str(path), f"expected a CSV file ({exc})") from None
    if not rows_t:
        raise BadInput("trace", str(path), "expected at least one request row")
    t = np.array(rows_t, dtype=float)
    order = np.argsort(t, kind="stable")
    t = t[order] - t[order][0]
    return Trace(p.name, t, np.array(rows_i, dtype=np.int64)[order],
                 np.array(rows_o, dtype=np.int64)[order])


def _shown_header(cols: list[str]) -> str:
    """A header fit to repeat in a message: its column names when they look like names,
    else only how many there are (the first line of a file that is no trace stays unshown)."""
    if cols and all(c.replace("_", "").isalnum() and len(c) <= 32 for c in cols):
        return ",".join(cols)
    return f"(a first line of {len(cols)} field(s) that are not column names)"


def _cell(p: Path, line: int, row: dict, col: str, kind: type):
    raw = (row.get(col) or "").strip()
    try:
        v = kind(raw)
    except ValueError:
        v = None
    if kind is float:
        ok = v is not None and math.isfinite(v) and v >= 0
        allowed = "expected a time >= 0, s"
    else:
        ok = v is not None and 1 <= v <= MAX_TOKENS
        allowed = f"expected an int in [1, {MAX_TOKENS}] tokens"
    if not ok:
        raise BadInput(f"{p.name}:{line}.{col}", raw, allowed)
    return v


def trace_from(trace: str, rate: float | None = None, requests: int | None = None,
               duration_s: float | None = None, arrival: str = "poisson", cv: float = 1.0,
               seed: int = 0, max_tokens: int | None = None) -> Trace:
    """A named synthetic trace (``sharegpt`` / ``alpaca``) or a CSV file's; a CSV trace keeps
    its own timestamps (``rate`` rescales them when given) and ``requests`` / ``duration_s``
    cut it. ``max_tokens`` (the model's positions) clips a synthetic request's prompt and
    output to fit, as serving benchmarks keep only requests the model can hold."""
    if not isinstance(trace, (str, Path)) or not str(trace):
        raise BadInput("trace", trace, "expected sharegpt, alpaca or a CSV file")
    if str(trace) in DISTRIBUTIONS:
        if rate is None:
            raise BadInput("rate", rate, "expected a number > 0 (requests/s)")
        dist = distribution(str(trace))
        if max_tokens is not None and max_tokens < dist.max_len:
            dist = dataclasses.replace(dist, max_len=max(2, int(max_tokens)))
        return synthetic_trace(dist, rate, requests, duration_s, arrival, cv, seed)
    if not str(trace).endswith(".csv") and not Path(trace).exists():
        raise BadInput("trace", str(trace), "expected sharegpt, alpaca or a CSV file")
    tr = read_csv_trace(trace)
    t, i, o = tr.arrival_s, tr.input_len, tr.output_len
    if rate is not None:
        _positive("rate", rate, high=1e9)
        if len(tr) > 1 and math.isfinite(tr.rate):
            t = t * (tr.rate / rate)
    if requests is not None:
        _positive("requests", requests, int, MAX_REQUESTS)
        t, i, o = t[:requests], i[:requests], o[:requests]
    if duration_s is not None:
        _positive("duration_s", duration_s, high=1e9)
        keep = _arrived_before(t, duration_s)
        t, i, o = t[:keep], i[:keep], o[:keep]
    return Trace(tr.name, t, i, o)


def _arrived_before(t: np.ndarray, duration_s: float) -> int:
    """How many of the sorted arrival times ``t`` (s) fall before ``duration_s``, at least
    one."""
    return max(1, int(np.searchsorted(t, duration_s)))
