"""Typed exceptions. The CLI turns every :class:`DSEError` into one line on stderr and exit 2."""

import re

#: Longest value shown in an error message, characters (longer values are cut with "...").
MAX_VALUE_CHARS = 80


def one_line(text: str) -> str:
    """``text`` with line breaks and other control characters escaped, so a message stays one
    line whatever the input held."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)


def shorten(value: object, limit: int = MAX_VALUE_CHARS) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters."""
    text = one_line(repr(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The first non-empty line of an exception's message (of the driver's error it wraps, for
    SQLAlchemy's), on one line and cut to ``limit`` characters: for messages about errors of
    code we call."""
    orig = getattr(exc, "orig", None) or exc
    lines = [ln.strip() for ln in str(orig).splitlines() if ln.strip()]
    return one_line(lines[0] if lines else type(orig).__name__)[:limit]


def redact_url(url: str) -> str:
    """``url`` with its password masked (``postgresql://u:***@host/db``, ``?password=***``),
    fit to print or store. The user information runs from ``://`` to the *last* ``@`` and the
    password from its first ``:``, so a password holding ``/``, ``:``, ``@``, ``?`` or ``#``
    is masked whole (where a query holds an ``@`` too, more than the password is masked:
    never less)."""
    text = str(url)
    scheme, sep, rest = text.partition("://")
    at = rest.rfind("@")
    if sep and at >= 0:
        user, colon, _ = rest[:at].partition(":")
        if colon:
            text = f"{scheme}://{user}:***{rest[at:]}"
    return re.sub(r"(?i)([?&;]password=)[^&;#]*", r"\1***", text)


class DSEError(ValueError):
    """Base of every error that the user can fix by changing the input."""


class BadInput(DSEError):
    """An input names something that does not exist or holds a value that is not allowed.

    The message names the field, the bad value and what is allowed.
    """

    def __init__(self, field: str, value: object, allowed: str):
        self.field, self.value, self.allowed = field, value, allowed
        super().__init__(f"{one_line(field)}: {one_line(allowed)}, got {shorten(value)}")


class InfeasibleDesign(DSEError):
    """The design cannot run the workload (a tile that does not fit, a model over capacity)."""

    PREFIX = "infeasible design: "

    def __init__(self, reason: str):
        # rebuilt from its own message (SimPy re-raises a process's exception so) it keeps
        # one prefix
        reason = str(reason)
        self.reason = reason[len(self.PREFIX):] if reason.startswith(self.PREFIX) else reason
        super().__init__(self.PREFIX + self.reason)


class CaptureError(DSEError):
    """``torch.export`` (or the model itself) rejected the module or its inputs."""
