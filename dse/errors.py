"""Typed exceptions. The CLI turns every :class:`DSEError` into one line on stderr and exit 2."""


class DSEError(ValueError):
    """Base of every error that the user can fix by changing the input."""


class BadInput(DSEError):
    """An input names something that does not exist or holds a value that is not allowed.

    The message names the field, the bad value and what is allowed.
    """

    def __init__(self, field: str, value: object, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{field}: {allowed}, got {value!r}")


class InfeasibleDesign(DSEError):
    """The design cannot run the workload (a tile that does not fit, a model over capacity)."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"infeasible design: {reason}")


class CaptureError(DSEError):
    """``torch.export`` (or the model itself) rejected the module or its inputs."""
