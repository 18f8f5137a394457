"""Writing output files: never a truncated file after a kill, one line when the disk refuses.

:func:`atomic_open` writes through a temporary file in the same directory and renames it over
the target when the block ends without error, so a kill mid-write leaves the old file or none
(never half of one). A target that exists and is not a regular file (a device such as
``/dev/null``, a named pipe) is written directly: renaming over it would replace the device.
"""

from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from dse.errors import BadInput


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs) -> Iterator[IO]:
    """``open(path, mode)`` for writing, made atomic as the module docstring says."""
    path = Path(path)
    if path.exists() and not path.is_file():
        with open(path, mode, **kwargs) as f:
            yield f
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically."""
    with atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)


@contextmanager
def output_errors(field: str, path: str | Path) -> Iterator[None]:
    """Turn an ``OSError`` while writing ``path`` (a full disk, a missing directory, no
    permission) into one :class:`BadInput` line naming the option ``field``."""
    try:
        yield
    except OSError as exc:
        raise BadInput(field, str(path), "expected a file that can be written ("
                       + (exc.strerror or type(exc).__name__) + ")") from None
