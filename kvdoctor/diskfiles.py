"""Files kvdoctor owns on disk: a corrupt one is moved aside (kept for a post-mortem), never deleted."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

# sqlite keeps a database's uncommitted pages beside it: they belong to the file and go aside with it
COMPANIONS = ("-wal", "-shm", "-journal")


def set_aside(path: str | Path, now: float | None = None) -> Path | None:
    """Rename a corrupt file (and its sqlite companions) to `<name>.corrupt-<UTC time>`; None if it cannot be."""
    p = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    dest = p.with_name(f"{p.name}.corrupt-{stamp}")
    n = 1
    while dest.exists():  # two corruptions within a second keep both files
        n += 1
        dest = p.with_name(f"{p.name}.corrupt-{stamp}-{n}")
    try:
        p.rename(dest)
    except OSError:
        return None
    for suffix in COMPANIONS:
        side = p.with_name(p.name + suffix)
        try:
            side.rename(dest.with_name(dest.name + suffix))
        except OSError:
            continue  # absent, as it usually is
    return dest


def unlink_quietly(path: str | Path) -> None:
    """Remove a file kvdoctor wrote if it is there (a temporary file left by a failed write)."""
    with contextlib.suppress(OSError):
        Path(path).unlink()
