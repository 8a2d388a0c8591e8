"""The daemon's simulations in one child process at the lowest CPU priority, so a cycle is not slowed by them.

Threads share the GIL: a worker thread that simulates beside the cycle thread takes about half of the interpreter
whatever its OS priority, and a cycle of a fleet at a limit runs up to twice as long. A child process at nice 19
gets what the cycle leaves (a CFS weight of 15 against 1,024 on a shared core). The worker threads stay: they pick
what to compute, share results and queue; they hand the pure computation (`predict`, the headroom search) over
here and wait without holding the GIL. One child per daemon process, started on first use ("spawn": a fork of a
process with threads may copy a held lock); a child that dies, or is stopped by `close()`, is replaced on the next
call. Once closed for good (`close(final=True)`, at exit) none is started again: a call then raises `OffloadClosed`,
a RuntimeError the workers already take as "gone".
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from functools import partial
from typing import Any, TypeVar

from kvdoctor.errors import KvdoctorError

T = TypeVar("T")
TASKS_PER_CHILD = 2000  # a child is replaced after this many: whatever it leaks goes with it
# a call the child has not answered in this long is abandoned and the child stopped: every target's predictions
# wait behind the one call in it. Wall time, at nice 19 on a busy core: ten times the slowest plan seen
CALL_TIMEOUT_S = 300.0


NICE_ENV = (
    "KVDOCTOR_SIMULATION_NICE"  # the child's niceness (default 19); a test under parallel load lowers it
)


def _lowest_priority() -> None:
    try:
        nice = int(os.environ.get(NICE_ENV, "19"))
    except ValueError:
        nice = 19
    with contextlib.suppress(OSError):  # not allowed to: the child still takes the work off the cycle's GIL
        os.nice(max(0, min(19, nice)))


class OffloadClosed(KvdoctorError, RuntimeError):
    """The offload was closed (the process is exiting): nothing more is simulated."""


class OffloadTimeout(KvdoctorError):
    """A call ran past its deadline in the child: it was stopped, and the next call gets a new child."""


class Offload:
    """Runs picklable functions in a nice-19 child process, one call at a time."""

    def __init__(self, call_timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.call_timeout_s = call_timeout_s
        self._lock = threading.Lock()
        # one call in the child at a time, so a call's deadline counts its own run, not its wait behind another
        # thread's (which would stop the child under that other call)
        self._calling = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self._closed = False

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._closed:
                # a worker whose call close() broke would otherwise start a child that exit then waits for
                raise OffloadClosed("the simulation child was closed: the process is exiting")
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_lowest_priority,
                    max_tasks_per_child=TASKS_PER_CHILD,
                )
            return self._pool

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """fn(*args) in the child; its exception is raised here. A dead child is replaced and the call tried once more."""
        with self._calling:
            return self._run(fn, *args)

    def _run(self, fn: Callable[..., T], *args: Any) -> T:
        for attempt in (1, 2):
            pool = self._executor()
            try:
                return pool.submit(fn, *args).result(timeout=self.call_timeout_s)
            except FutureTimeout:
                self._stop(pool)
                name = getattr(getattr(fn, "func", fn), "__name__", "a call")  # a partial's function
                raise OffloadTimeout(
                    f"{name} ran past {self.call_timeout_s:g} s in the simulation child: stopped, so the other "
                    "targets' predictions go on"
                ) from None
            except (BrokenProcessPool, CancelledError):  # cancelled: another caller shut the broken pool down
                with self._lock:
                    closed = self._closed
                    if self._pool is pool:
                        self._pool = None
                pool.shutdown(wait=False, cancel_futures=True)
                if closed:
                    raise OffloadClosed("the simulation child was closed: the process is exiting") from None
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def pids(self) -> list[int]:
        """The child's process id(s), for benchmarks that count its CPU."""
        with self._lock:
            procs = getattr(self._pool, "_processes", None) or {}
            return list(procs)

    def close(self, final: bool = False) -> None:
        """Stop the child now (a simulation in progress is abandoned); `final`: none is started again (exit)."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._closed = self._closed or final
        if pool is not None:
            _terminate(pool)

    def _stop(self, pool: ProcessPoolExecutor) -> None:
        """Stop this pool's child (a call in it ran too long); the next call starts another."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        _terminate(pool)


def _terminate(pool: ProcessPoolExecutor) -> None:
    # concurrent.futures has no public way to stop a running task: its processes are terminated
    for proc in list((getattr(pool, "_processes", None) or {}).values()):
        proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)


_SHARED: Offload | None = None
_SHARED_LOCK = threading.Lock()


def shared() -> Offload:
    """The process's one offload (a daemon's advisor and headroom workers, and every daemon a test starts)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = Offload()
            # before concurrent.futures' own exit hook, which would wait for a simulation in progress to end
            getattr(threading, "_register_atexit", atexit.register)(partial(_SHARED.close, final=True))
        return _SHARED
