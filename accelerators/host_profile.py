"""Host profiles: what the host side of a framework costs per op, as data.

A host profile is a JSON file that ``python -m dse.calibrate.host_profile`` writes on a machine
with a CUDA GPU: how long PyTorch eager takes on that machine's CPU to dispatch one op (from the
Python call to the kernel launch returning), per ATen operator, measured on tiny tensors so that
the GPU is never the bottleneck. The ``gpu`` template reads it for ``runtime: eager`` and
``runtime: cuda_graphs`` (:mod:`accelerators.gpu_runtime`). Fields (all seconds, finite, >= 0):

* ``dispatch_s``: per ATen operator (``Op.target``), with ``*KIND`` fallbacks per op kind and
  ``*default`` for the rest (required);
* ``view_s``: one view op (``view``, ``transpose``, ...: dispatched, no kernel);
* ``launch_latency_s``: an idle GPU's round trip: from the launch call returning to the kernel
  starting, plus the host noticing the end of the stream (paid once per forward);
* ``graph_launch_s``: the host time of one CUDA-graph replay;
* ``step_s``: host time per forward outside the ops (the model's and the framework's Python),
  eager only.

Plus ``measured`` (true only for a profile measured on a real machine) and ``source`` (where,
which CPU and GPU, torch version, the command). Shipped profiles live in
``accelerators/host_profiles/``; a path works too.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from dse.errors import BadInput

#: Folder of the host profiles shipped with the package (package data).
HOST_PROFILE_DIR = Path(__file__).resolve().parent / "host_profiles"

#: Format version of a host profile file.
HOST_PROFILE_SCHEMA = 1

#: Scalar fields of a profile, s.
SCALARS = ("view_s", "launch_latency_s", "graph_launch_s", "step_s")


@dataclass(frozen=True)
class HostProfile:
    """A validated host profile (see the module docstring); times in s."""

    name: str
    dispatch_s: Mapping[str, float]
    view_s: float
    launch_latency_s: float
    graph_launch_s: float
    step_s: float
    measured: bool
    source: Mapping[str, Any] = field(default_factory=dict)

    def dispatch(self, target: str, kind: str) -> float:
        """Host time to dispatch one op: its ATen operator's, else its kind's, else the
        default, s."""
        d = self.dispatch_s
        for key in (target, "*" + kind):
            if key in d:
                return d[key]
        return d["*default"]


def shipped_host_profiles() -> list[str]:
    """Names of the host profiles shipped with the package."""
    return sorted(p.stem for p in HOST_PROFILE_DIR.glob("*.json"))


def _allowed() -> str:
    names = ", ".join(shipped_host_profiles()) or "none yet"
    return (f"a shipped host profile ({names}) or the path of a JSON written by "
            "`python -m dse.calibrate.host_profile`")


def load_host_profile(name_or_path: str, field_name: str = "hw.host_profile") -> HostProfile:
    """The profile of a shipped name or a JSON path; :class:`BadInput` naming ``field_name``
    when it is neither, is not JSON, or holds a missing, negative or non-finite time."""
    shipped = HOST_PROFILE_DIR / f"{name_or_path}.json"
    path = shipped if shipped.is_file() else Path(name_or_path).expanduser()
    if not path.is_file():
        raise BadInput(field_name, name_or_path, f"expected {_allowed()}")
    return _read(str(path.resolve()), field_name, name_or_path)


@lru_cache(maxsize=32)
def _read(path: str, field_name: str, value: str) -> HostProfile:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        raise BadInput(field_name, value, f"expected {_allowed()} (not JSON)") from None
    return profile_from_dict(data, Path(path).stem, field_name, value)


def profile_from_dict(data: Any, name: str, field_name: str = "hw.host_profile",
                      value: Any = None) -> HostProfile:
    """Validate a profile dict (:class:`BadInput` on the first problem, naming its key)."""
    value = name if value is None else value

    def bad(why: str):
        return BadInput(field_name, value, f"expected {_allowed()}: {why}")

    if not isinstance(data, dict) or data.get("kind") != "host_profile":
        raise bad('not a host profile (no "kind": "host_profile")')
    if data.get("schema") != HOST_PROFILE_SCHEMA:
        raise bad(f"schema {data.get('schema')!r}, this version reads {HOST_PROFILE_SCHEMA}")
    if not isinstance(data.get("measured"), bool):
        raise bad('"measured" must be true or false')
    dispatch = data.get("dispatch_s")
    if not isinstance(dispatch, dict) or "*default" not in dispatch:
        raise bad('"dispatch_s" must map operators to seconds and hold "*default"')
    times = {f"dispatch_s.{k}": v for k, v in dispatch.items()}
    times.update({k: data.get(k) for k in SCALARS})
    for key, t in times.items():
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) \
                or t < 0:
            raise bad(f"{key} = {t!r} is not a finite number of seconds >= 0")
    return HostProfile(name=str(data.get("name") or name),
                       dispatch_s={str(k): float(v) for k, v in dispatch.items()},
                       **{k: float(data[k]) for k in SCALARS}, measured=data["measured"],
                       source=dict(data.get("source") or {}))
