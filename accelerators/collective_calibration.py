"""Collectives calibrated on measurements: per-algorithm bandwidth efficiency and per-call
latency, fitted on the project's own lent-GPU runs and kept as data.

The alpha-beta model (:mod:`accelerators.collectives`) takes NCCL's per-link rate for every
algorithm; measured through PyTorch on NVLink GPUs, all-gather and reduce-scatter reach only
70-90 % of it and every call from Python costs tens of microseconds the model has no term for
(docs/validation.md, "Collectives"). A calibration file (``accelerators/calibration/
collectives_<link>.json``, written by ``benchmarks/collective_calibration.py``) holds, for one
link standard:

* ``loss``: per collective and algorithm (``all_gather/ring``), ``c`` of the share of the
  model's rate the measured bandwidth term reaches on ``p`` devices, ``1 - c / p`` (a factor
  on the rate of every phase). The form is empirical [E]: on the lent H100s the shares of
  all-gather, reduce-scatter and all-to-all measured on 2 GPUs (0.59-0.62) and on 4
  (0.78-0.80) both fit it, and it tends to NCCL's full per-link rate on 8, as the NCCL
  maintainers' 8-GPU figures show (benchmarks/collective_validation.py);
* ``call_latency_s``: what one call adds in each mode of issuing it:
  ``eager_b2b`` (calls issued back to back from Python: the host's issue interval, which
  overlaps the device's work, so a call takes ``max(interval, device time)``),
  ``eager_call`` (one call from Python, synchronised: launch + device time) and, where a
  measurement has them, ``graph_b2b`` / ``graph_call`` (the same calls captured in a CUDA
  graph).

``device`` (the default mode) is the collective's device time alone: what a CUDA graph's
back-to-back replay shows, and what the system engine charges (its GPUs' host runtime adds the
rest). Reading a file cannot run code (JSON); a file with a value out of range is refused with
one line.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

from dse.errors import BadInput

CALIBRATION_DIR = Path(__file__).resolve().parent / "calibration"
#: How a collective is issued (see the module docstring).
MODES = ("device", "eager_b2b", "eager_call", "graph_b2b", "graph_call")


def shipped_json(name: str, what: str) -> Any | None:
    """The parsed JSON of shipped calibration file ``name`` (in :data:`CALIBRATION_DIR`), or
    None when it is not shipped; one line naming the file when it is not JSON (``what``: the
    kind of calibration it should hold)."""
    path = CALIBRATION_DIR / name
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        raise BadInput("calibration", name, f"expected a JSON {what}") from None


@lru_cache(maxsize=16)
def calibration(link: str) -> dict[str, Any] | None:
    """The shipped calibration of link standard ``link``, or None."""
    name = f"collectives_{link}.json"
    d = shipped_json(name, "collective calibration")
    if d is None:
        return None
    problem = _problem(d)
    if problem:
        raise BadInput("calibration", name, f"expected a valid collective calibration "
                       f"({problem})")
    return d


def _problem(d: Any) -> str | None:
    if not isinstance(d, dict):
        return "not an object"
    loss, lat = d.get("loss"), d.get("call_latency_s")
    if not isinstance(loss, dict) or not isinstance(lat, dict):
        return "loss and call_latency_s must be objects"
    for k, v in loss.items():
        if not (isinstance(v, (int, float)) and not isinstance(v, bool) and -1.0 <= v <= 1.9):
            return f"loss.{k} = {v!r}: expected a number in [-1, 1.9]"
    for k, v in lat.items():
        if k not in MODES or not (isinstance(v, (int, float)) and not isinstance(v, bool)
                                  and 0 <= v < 1e-2):
            return f"call_latency_s.{k} = {v!r}: expected a mode of {MODES} and seconds in " \
                   "[0, 0.01)"
    return None


def efficiency(link: str, kind: str, algorithm: str, devices: int) -> float:
    """The measured share of the model's rate of ``kind`` by ``algorithm`` on ``devices``
    devices over ``link``: ``1 - loss / devices`` (1 where nothing was measured)."""
    cal = calibration(link)
    if cal is None or devices < 2:
        return 1.0
    return share(float(cal["loss"].get(f"{kind}/{algorithm}", 0.0)), devices)


def share(loss: float, devices: int) -> float:
    """``1 - loss / devices``, kept in [0.05, 1.2]."""
    return min(1.2, max(0.05, 1.0 - loss / devices))


def issued(device_s: float, link: str, mode: str) -> float:
    """The time of one collective of device time ``device_s`` issued in ``mode``
    (:data:`MODES`) on ``link``."""
    if mode not in MODES:
        raise BadInput("call", mode, "expected one of " + ", ".join(MODES))
    if mode == "device" or device_s <= 0:
        return device_s
    cal = calibration(link)
    lat = float((cal or {}).get("call_latency_s", {}).get(mode, 0.0))
    return max(lat, device_s) if mode.endswith("_b2b") else lat + device_s


# ------------------------------------------------------------------------------ fitting
def fit(rows: list[dict], model) -> dict[str, Any]:
    """Fit the calibration on measured ``rows`` (``collective``, ``bytes``, ``devices`` and
    any of ``eager_b2b_s``, ``eager_call_s``, ``graph_b2b_s``, ``graph_call_s``) given
    ``model(kind, nbytes, devices) -> (latency_s, bandwidth_s, algorithm)``, the uncalibrated
    device model:

    * ``loss`` of each collective and algorithm: the median, over rows of 16 MiB and more
      (where the bandwidth term dominates), of ``p (1 - r)``, ``r`` the model's bandwidth
      term over the measured device time less the model's latency term (back-to-back times:
      at those sizes the host's issue interval is hidden);
    * ``call_latency_s`` of each mode: back to back, the median measured time of calls of
      64 KiB and less (the host's issue interval, which hides the device there); single
      calls, the median of measured time less the calibrated device time over those rows.
    """
    big = [r for r in rows if r["bytes"] >= 16 * 2**20]
    small = [r for r in rows if r["bytes"] <= 64 * 2**10]
    ratios: dict[str, list[float]] = {}
    for r in big:
        t = r.get("graph_b2b_s") or r.get("eager_b2b_s")
        if not t:
            continue
        lat, bw, alg = model(r["collective"], r["bytes"], r["devices"])
        if t > lat and bw > 0:
            ratios.setdefault(f"{r['collective']}/{alg}", []).append(
                r["devices"] * (1.0 - bw / (t - lat)))
    loss = {k: round(_median(v), 4) for k, v in sorted(ratios.items())}

    def device(r):
        lat, bw, alg = model(r["collective"], r["bytes"], r["devices"])
        return lat + bw / share(loss.get(f"{r['collective']}/{alg}", 0.0), r["devices"])

    call = {}
    for mode in ("eager_b2b", "graph_b2b"):
        v = [r[f"{mode}_s"] for r in small if r.get(f"{mode}_s")]
        if v and mode == "eager_b2b":
            call[mode] = _median(v)
    for mode in ("eager_call", "graph_call"):
        v = [r[f"{mode}_s"] - device(r) for r in small if r.get(f"{mode}_s")]
        if v:
            call[mode] = max(0.0, _median(v))
    return {"loss": loss, "call_latency_s": {k: round(v, 9) for k, v in call.items()}}


def _median(v: list[float]) -> float:
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2]) if n else math.nan
