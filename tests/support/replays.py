"""One replay of a recording per (recording, cadence, interval, idle_after), shared by every test module.

Many modules judge the same labelled recordings through the shipped rule pack (the labelled windows, idle, fading,
prefill, LoRA, …), each at 1 s and 15 s scrapes: replaying is most of their time. `replayed()` runs the real
`kvdoctor.replay.replay` once and keeps the diagnoses of every evaluation in memory, and in a cache directory that
conftest names (pytest's cache dir, or a directory shared by the run's xdist workers), so another worker or a later
run reads them instead of replaying again.

A cached replay is found by a key over everything it depends on: the recording's bytes and target name, the
parameters, the bytes of every file of the kvdoctor package imported (its code and its rule pack) and of this module,
and the versions of Python and of the libraries the pipeline parses with. Change any of them and the key changes, so a stale replay
can never pass a test; it is computed afresh.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import math
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from importlib import metadata
from itertools import takewhile
from pathlib import Path
from typing import NamedTuple, TypeVar

import kvdoctor
from kvdoctor.pipeline import IDLE_AFTER_S, Pipeline
from kvdoctor.query import recording_instance
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.verdicts import Diagnosis

FORMAT = "kvdoctor-replay-1"  # the name of this cache's entries (this module's own bytes are in the key)
LIBRARIES = ("prometheus-client", "promql-parser", "PyYAML")

cache_dir: Path | None = None  # set by tests/conftest.py; None keeps replays in this process only
T = TypeVar("T")
UNUSED_S = 7 * 86400.0  # prune() drops replays no run has read for a week (older kvdoctor sources, mostly)


class Evaluated(NamedTuple):
    """One evaluation of a replay: its time and the diagnoses it published (a Cycle without the rule outcome)."""

    t: float
    diagnoses: tuple[Diagnosis, ...]


class Params(NamedTuple):
    """How a recording is replayed: its scrape cadence (0: every frame), evaluation interval, idle_after, end."""

    cadence: float
    interval_s: float
    idle_after_s: float
    until: float  # the last evaluation kept (inf: the recording's end)


def replayed(
    path: str | Path,
    cadence: float = 0.0,
    *,
    interval_s: float = 5.0,
    idle_after_s: float = IDLE_AFTER_S,
    until: float = math.inf,
) -> tuple[Evaluated, ...]:
    """`replay(Pipeline(shipped rule pack), [path], interval_s, cadence)` with idle_after_s, computed once.

    `until` stops after the last evaluation at or before it: a replay is causal, so what came before is the same as
    in a whole replay, for less work. The diagnoses are shared between callers: read them, never change them.
    """
    st = os.stat(path)
    params = Params(float(cadence), float(interval_s), float(idle_after_s), float(until))
    return _memo(str(path), st.st_size, st.st_mtime_ns, params)


@functools.lru_cache(maxsize=128)  # ~0.4 MB each; beyond that the disk cache answers
def _memo(path: str, size: int, mtime_ns: int, params: Params) -> tuple[Evaluated, ...]:
    del size, mtime_ns  # only part of the memo's key: a rewritten file is read again
    return stored(_key(Path(path), params), lambda: _replay(Path(path), params))


def stored(key: str, compute: Callable[[], T]) -> T:
    """compute() once for every worker and run that shares cache_dir (or every call, without one); `key` names it.

    The key must hold everything the value depends on (environment() has the package's part).
    """
    if cache_dir is None:
        return compute()
    cache_dir.mkdir(parents=True, exist_ok=True)
    entry = cache_dir / f"{key}.pickle"
    # one worker computes, the others wait for it and read its file (a lock per key, released if a worker dies)
    with open(cache_dir / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if entry.exists():
            os.utime(entry)  # still in use: prune() keeps it
            return pickle.loads(entry.read_bytes())  # type: ignore[no-any-return]  # this suite's own, never downloaded
        got = compute()
        fd, tmp = tempfile.mkstemp(dir=cache_dir, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            pickle.dump(got, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, entry)
        return got


def prune(directory: Path, now: float) -> None:
    """Remove the replays (and their locks) of a kept cache directory that no run has read for UNUSED_S."""
    for entry in directory.glob("*.pickle"):
        if now - entry.stat().st_mtime > UNUSED_S:
            entry.unlink(missing_ok=True)
            entry.with_suffix(".lock").unlink(missing_ok=True)


def _replay(path: Path, params: Params) -> tuple[Evaluated, ...]:
    pipeline = Pipeline(load_files(default_rule_files()))
    pipeline.idle_after_s = params.idle_after_s
    cycles = replay(pipeline, [path], params.interval_s, params.cadence)
    return tuple(Evaluated(c.t, tuple(c.diagnoses)) for c in takewhile(lambda c: c.t <= params.until, cycles))


def _key(path: Path, params: Params) -> str:
    h = hashlib.sha256()
    for part in (FORMAT, recording_instance(path), repr(tuple(params)), environment()):
        h.update(part.encode())
        h.update(b"\0")
    h.update(path.read_bytes())
    return h.hexdigest()


@functools.cache
def environment() -> str:
    """A digest of what a replay's outcome depends on besides the recording: kvdoctor's files and pack, the libraries."""
    h = hashlib.sha256(sys.version.encode())
    h.update(Path(__file__).read_bytes())  # this module's own way of replaying
    for lib in LIBRARIES:
        h.update(f"\0{lib}={metadata.version(lib)}".encode())
    package = Path(kvdoctor.__file__).resolve().parent
    for rule_file in default_rule_files():  # the pack, wherever it lives (kvdoctor/rulepack today)
        h.update(b"\0" + rule_file.read_bytes())
    for f in sorted(package.rglob("*")):
        if f.is_file() and "__pycache__" not in f.parts:
            h.update(f"\0{f.relative_to(package)}\0".encode())
            h.update(f.read_bytes())
    return h.hexdigest()
