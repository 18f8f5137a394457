"""Reading files a user names, and signing the cache files this program writes. A leaf like
:mod:`dse.errors` (it imports nothing else from the project), so every layer may use it.

:func:`read_regular` opens without blocking and reads only a regular file, up to a size: a
named pipe, a device, a socket or a directory is refused in one line instead of read forever
or without end.

:func:`seal` / :func:`unseal` put an HMAC-SHA256 over a cache entry with a key kept in the
cache directory (created private, mode 0600, on first use): an entry that was corrupted,
truncated, edited (doubled FLOPs) or planted without the key does not verify, and the caller
rebuilds it. The key stops accidents and files copied in from elsewhere; it cannot stop the
same user, who can read it (the cache directory is refused when anyone else can write it).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
import stat
from pathlib import Path

from dse.errors import BadInput

#: Name of the signing key's file inside a cache directory.
KEY_FILE = ".signing-key"
_KEYS: dict[str, bytes] = {}
_TAG = b"dse-hmac-sha256:"


def read_regular(path: str | Path, field: str, max_bytes: int,
                 expected: str = "a regular file") -> bytes:
    """The bytes of the regular file at ``path`` (at most ``max_bytes``); :class:`BadInput`
    naming ``field`` for a missing file, a directory, a pipe, device or socket, an unreadable
    or a too large one."""
    p = str(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise BadInput(field, p, f"expected {expected} (no such file)") from None
    except IsADirectoryError:
        raise BadInput(field, p, f"expected {expected}, not a directory") from None
    except OSError as exc:
        raise BadInput(field, p, f"expected {expected} that can be read "
                       f"({exc.strerror or type(exc).__name__})") from None
    with os.fdopen(fd, "rb") as f:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise BadInput(field, p, f"expected {expected}, not a directory")
        if not stat.S_ISREG(mode):
            raise BadInput(field, p, f"expected {expected}, not a device, pipe or socket")
        try:
            blob = f.read(max_bytes + 1)
        except OSError as exc:
            raise BadInput(field, p, f"expected {expected} that can be read "
                           f"({exc.strerror or type(exc).__name__})") from None
    if len(blob) > max_bytes:
        raise BadInput(field, p, f"expected {expected} of at most {max_bytes:,} bytes")
    return blob


def signing_key(cache_dir: Path) -> bytes:
    """The cache directory's HMAC key, made (32 random bytes, mode 0600) if it has none."""
    d = str(cache_dir)
    key = _KEYS.get(d)
    if key is not None:
        return key
    path = Path(d) / KEY_FILE
    try:
        key = read_regular(path, "cache key", 64)
    except BadInput:
        key = b""
    if len(key) != 32:
        Path(d).mkdir(mode=0o700, parents=True, exist_ok=True)
        key = secrets.token_bytes(32)
        tmp = Path(d) / f"{KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        os.replace(tmp, path)
    _KEYS[d] = key
    return key


def seal(payload: bytes, cache_dir: Path, name: str) -> bytes:
    """``payload`` with an HMAC over it and the entry's ``name`` (so an entry copied to
    another name does not verify either)."""
    mac = hmac.new(signing_key(cache_dir), name.encode() + b"\0" + payload, hashlib.sha256)
    return _TAG + mac.hexdigest().encode() + b"\n" + payload


def unseal(blob: bytes, cache_dir: Path, name: str) -> bytes | None:
    """The payload of a :func:`seal`-ed ``blob``, or None when it does not verify."""
    head, sep, payload = blob.partition(b"\n")
    if not sep or not head.startswith(_TAG):
        return None
    mac = hmac.new(signing_key(cache_dir), name.encode() + b"\0" + payload, hashlib.sha256)
    return payload if hmac.compare_digest(head[len(_TAG):], mac.hexdigest().encode()) else None


def forget_keys() -> None:
    """Drop the keys held in memory (tests that switch cache directories)."""
    _KEYS.clear()
