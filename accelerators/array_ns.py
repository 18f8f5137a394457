"""One array namespace for the vectorised cost models: numpy on the CPU, torch where asked
(CUDA when present, else its CPU build), so that a cost written once runs on either.

Only what the vectorised templates use is here, each with numpy's semantics (the torch side
converts): elementwise ``where`` / ``minimum`` / ``maximum`` with Python scalars, floor
division (Python's rounding, which torch's ``//`` follows for floats and ints), true division
always in float64 (torch would give float32 for two int64 tensors), truncation of whole
floats to int64, ``argmin`` returning the first of equal minima. Every float is float64 and
every int int64, so both backends compute the same IEEE operations in the same order: equal
results (tested to 1e-12 relative; exactly equal on the CPU).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Devices a caller may name: ``cpu`` (numpy), ``torch`` (torch on its CPU build), ``cuda``
#: (torch on the GPU; ``cuda:N`` names one).
DEVICES = ("cpu", "torch", "cuda")


class Numpy:
    """numpy with the few helpers the cost kernels need (the reference backend)."""

    name = "numpy"
    device = "cpu"
    float64, int64, bool_ = np.float64, np.int64, np.bool_

    def asarray(self, x, dtype=None):
        return np.asarray(x, dtype=dtype)

    def to_numpy(self, x) -> np.ndarray:
        return np.asarray(x)

    def full(self, shape, value, dtype=np.float64):
        return np.full(shape, value, dtype=dtype)

    def zeros(self, shape, dtype=np.float64):
        return np.zeros(shape, dtype=dtype)

    where = staticmethod(np.where)
    minimum = staticmethod(np.minimum)
    maximum = staticmethod(np.maximum)
    ceil = staticmethod(np.ceil)
    isfinite = staticmethod(np.isfinite)

    @staticmethod
    def div(a, b):
        """True division in float64."""
        return np.true_divide(a, b, dtype=np.float64)

    @staticmethod
    def fill_where(x, mask, value) -> None:
        """``x[mask] = value`` in place (a scalar ``value``), without counting ``mask``."""
        np.copyto(x, value, where=mask)

    @staticmethod
    def to_int(x):
        """Truncation toward zero of whole floats (``int(x)``)."""
        return np.asarray(x).astype(np.int64)

    @staticmethod
    def to_float(x):
        return np.asarray(x).astype(np.float64)

    @staticmethod
    def stack(xs, dtype=None):
        return np.stack([np.asarray(x, dtype=dtype) for x in xs])

    @staticmethod
    def broadcast_to(x, shape):
        return np.broadcast_to(x, shape)

    @staticmethod
    def argmin0(x):
        """Index of the first minimum along axis 0, keeping that axis (length 1)."""
        return np.argmin(x, axis=0)[None]

    @staticmethod
    def take0(x, idx):
        """``x`` at ``idx`` (from :meth:`argmin0`) along axis 0, that axis dropped."""
        return np.take_along_axis(x, idx, 0)[0]

    @staticmethod
    def any(x) -> bool:
        return bool(np.any(x))

    @staticmethod
    def errstate():
        return np.errstate(divide="ignore", invalid="ignore", over="ignore")

    @staticmethod
    def sum0(x):
        return x.sum(axis=0)

    @staticmethod
    def max0(x):
        return x.max(axis=0)


class Torch:
    """torch on ``device`` with numpy's semantics for what :class:`Numpy` offers."""

    name = "torch"

    def __init__(self, device: str = "cpu"):
        import torch
        self.torch = torch
        self.device = torch.device(device)
        self.float64, self.int64, self.bool_ = torch.float64, torch.int64, torch.bool
        self._scalars: dict[tuple, Any] = {}

    def _scalar(self, x, dtype):
        """A 0-d tensor of ``x``: filled on the device (t.full, not a host copy, which waits
        for the device's queue and so serialises every kernel with Python), kept for reuse
        (read-only: the cost kernels never write into an operand)."""
        key = (dtype, x.hex() if isinstance(x, float) else x)   # -0.0 and NaN kept apart
        out = self._scalars.get(key)
        if out is None:
            if len(self._scalars) >= 4096:
                self._scalars.clear()
            out = self._scalars[key] = self.torch.full((), x, dtype=dtype, device=self.device)
        return out

    def _t(self, x, dtype=None):
        t = self.torch
        if isinstance(x, t.Tensor):
            return x if dtype is None or x.dtype == dtype else x.to(dtype)
        if isinstance(x, (bool, np.bool_)):
            return self._scalar(bool(x), t.bool)
        if isinstance(x, (int, np.integer)) and dtype is None:
            return self._scalar(int(x), t.int64)
        if isinstance(x, (float, np.floating)) and dtype is None:
            return self._scalar(float(x), t.float64)
        arr = np.asarray(x)
        if dtype is None:
            dtype = {np.dtype(np.bool_): t.bool, np.dtype(np.int64): t.int64}.get(
                arr.dtype, t.float64 if arr.dtype.kind == "f" else None)
            if dtype is None and arr.dtype.kind in "iu":
                dtype = t.int64
        if self.device.type == "cpu":
            return t.as_tensor(arr, dtype=dtype)
        # a pageable host buffer is staged by the copy call itself, so non_blocking is safe
        # and the host does not wait for the device's queue
        return t.as_tensor(arr, dtype=dtype).to(self.device, non_blocking=True)

    def asarray(self, x, dtype=None):
        if dtype is not None:
            dtype = {np.float64: self.float64, np.int64: self.int64, np.bool_: self.bool_,
                     float: self.float64, int: self.int64, bool: self.bool_}.get(dtype, dtype)
        return self._t(x, dtype)

    def to_numpy(self, x) -> np.ndarray:
        if isinstance(x, self.torch.Tensor):
            return x.detach().cpu().numpy()
        return np.asarray(x)

    def full(self, shape, value, dtype=None):
        return self.torch.full(tuple(shape), value, dtype=dtype or self.float64,
                               device=self.device)

    def zeros(self, shape, dtype=None):
        return self.torch.zeros(tuple(shape), dtype=dtype or self.float64, device=self.device)

    def _pair(self, a, b):
        """Two operands as tensors of one dtype, as numpy would promote them."""
        ta, tb = self._t(a), self._t(b)
        if ta.dtype != tb.dtype:
            dt = self.torch.promote_types(ta.dtype, tb.dtype)
            if dt == self.torch.float32:
                dt = self.float64
            ta, tb = ta.to(dt), tb.to(dt)
        return ta, tb

    def where(self, cond, a, b):
        ta, tb = self._pair(a, b)
        return self.torch.where(self._t(cond), ta, tb)

    def minimum(self, a, b):
        return self.torch.minimum(*self._pair(a, b))

    def maximum(self, a, b):
        return self.torch.maximum(*self._pair(a, b))

    def ceil(self, x):
        return self.torch.ceil(self._t(x, self.float64))

    def isfinite(self, x):
        return self.torch.isfinite(self._t(x))

    def div(self, a, b):
        return self.torch.true_divide(self._t(a, self.float64), self._t(b, self.float64))

    def fill_where(self, x, mask, value) -> None:
        x.masked_fill_(self._t(mask), value)

    def to_int(self, x):
        return self._t(x).to(self.int64)   # truncation toward zero, as numpy's astype

    def to_float(self, x):
        return self._t(x).to(self.float64)

    def stack(self, xs, dtype=None):
        ts = [self._t(x) for x in xs]
        if dtype is None:
            dtype = ts[0].dtype
            for x in ts[1:]:
                dtype = self.torch.promote_types(dtype, x.dtype)
        else:
            dtype = self.asarray(0, dtype).dtype
        shape = self.torch.broadcast_shapes(*(x.shape for x in ts))
        return self.torch.stack([x.to(dtype).expand(shape) for x in ts])

    def broadcast_to(self, x, shape):
        return self._t(x).expand(tuple(shape))

    def argmin0(self, x):
        return self.torch.argmin(x, dim=0, keepdim=True)   # the first of equal minima

    def take0(self, x, idx):
        return self.torch.gather(x, 0, idx)[0]

    def any(self, x) -> bool:
        return bool(self.torch.any(self._t(x)).item())

    @staticmethod
    def errstate():
        import contextlib
        return contextlib.nullcontext()

    @staticmethod
    def sum0(x):
        return x.sum(dim=0)

    @staticmethod
    def max0(x):
        return x.max(dim=0).values


_NUMPY = Numpy()


def namespace(device: str | None = None) -> Any:
    """The namespace for ``device``: None or ``cpu`` numpy; ``torch`` torch's CPU build;
    ``cuda`` (or ``cuda:N``) torch on that GPU; ``auto`` CUDA when torch sees one, else numpy.
    :class:`~dse.errors.BadInput` naming ``device`` otherwise, or when CUDA is asked for and
    absent."""
    from dse.errors import BadInput
    if device in (None, "cpu", "numpy"):
        return _NUMPY
    if not isinstance(device, str):
        raise BadInput("device", repr(device)[:60], "cpu, torch, cuda, cuda:N or auto")
    try:
        import torch
    except ImportError:
        raise BadInput("device", device, "cpu (torch is not installed)") from None
    if device == "auto":
        return Torch("cuda") if torch.cuda.is_available() else _NUMPY
    if device == "torch":
        return Torch("cpu")
    if device == "cuda" or device.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise BadInput("device", device, "cpu or torch (no CUDA device is visible)")
        return Torch(device)
    raise BadInput("device", device[:60], "cpu, torch, cuda, cuda:N or auto")
