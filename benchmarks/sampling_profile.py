"""Run a kvdoctor command under a sampling profiler that sees every thread, and write its hottest functions.

usage: python benchmarks/sampling_profile.py OUT.txt [--every-ms 5] -- serve --config kvdoctor.yml

cProfile follows only the thread that enabled it, and `kvdoctor serve` works on its cycle, scrape, parse and
what-if threads. Every second it writes OUT.tids.json (each thread's OS id and name), from which a benchmark reads
each thread's CPU in /proc/PID/task/TID/stat. This samples every thread's stack (sys._current_frames) every --every-ms and counts, per
thread name, the function on top (self) and every function on the stack (inclusive). Written on exit (SIGTERM
stops `serve` cleanly). A sample is taken only when the sampler gets the GIL, so shares are approximate.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kvdoctor.cli import main as kvdoctor_main  # noqa: E402


class Sampler(threading.Thread):
    """Counts, per thread name, the functions on top of and anywhere on the stack."""

    def __init__(self, every_s: float, tids: Path | None = None) -> None:
        super().__init__(name="sampler", daemon=True)
        self.every_s = every_s
        self.tids = tids  # where the threads' OS ids and names are written, for a benchmark's per-thread CPU
        self.self_: Counter[tuple[str, str]] = Counter()
        self.incl: Counter[tuple[str, str]] = Counter()
        self.samples: Counter[str] = Counter()
        self.stop = threading.Event()

    def run(self) -> None:
        """Sample until stopped."""
        me = threading.get_ident()
        written = 0.0
        while not self.stop.wait(self.every_s):
            names = {t.ident: t.name for t in threading.enumerate()}
            if self.tids is not None and time.monotonic() - written >= 1.0:
                written = time.monotonic()
                ids = {t.native_id: _group(t.name) for t in threading.enumerate() if t.native_id is not None}
                self.tids.write_text(json.dumps(ids))
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                tname = _group(names.get(ident, "?"))
                code = frame.f_code
                if code.co_name in ("wait", "select", "poll", "_worker", "run_forever", "accept"):
                    continue  # idle: waiting is not work
                self.samples[tname] += 1
                self.self_[(tname, _where(frame))] += 1
                seen = set()
                f = frame
                while f is not None:
                    w = _where(f)
                    if w not in seen:
                        seen.add(w)
                        self.incl[(tname, w)] += 1
                    f = f.f_back


def _group(name: str) -> str:
    return name.split("_")[0].rstrip("0123456789-") if name.startswith("ThreadPoolExecutor") else name


def _where(frame: object) -> str:
    code = frame.f_code  # type: ignore[attr-defined]
    path = code.co_filename
    short = path.split("/kvdoctor/", 1)[-1] if "/kvdoctor/" in path else Path(path).name
    return f"{short}:{code.co_firstlineno} {code.co_name}"


def write(out: Path, s: Sampler, top: int = 40) -> None:
    """The hottest functions per thread, self and inclusive, as shares of that thread's busy samples."""
    lines = []
    for tname, n in s.samples.most_common():
        lines.append(f"== thread {tname}: {n} busy samples")
        for title, counts in (("self", s.self_), ("inclusive", s.incl)):
            lines.append(f"-- {title}")
            mine = [(w, c) for (t, w), c in counts.items() if t == tname]
            for w, c in sorted(mine, key=lambda x: -x[1])[:top]:
                lines.append(f"{100 * c / n:6.1f}%  {w}")
    out.write_text("\n".join(lines) + "\n")


def main() -> int:
    """Profile the command after `--`."""
    argv = sys.argv[1:]
    if "--" not in argv or not argv:
        print(__doc__, file=sys.stderr)
        return 2
    cut = argv.index("--")
    out, opts, cmd = Path(argv[0]), argv[1:cut], argv[cut + 1 :]
    every = float(opts[opts.index("--every-ms") + 1]) / 1e3 if "--every-ms" in opts else 0.005
    sampler = Sampler(every, out.with_suffix(".tids.json"))
    sampler.start()
    t0 = time.monotonic()
    try:
        return kvdoctor_main(cmd)
    finally:
        sampler.stop.set()
        write(out, sampler)
        print(f"profile of {time.monotonic() - t0:.0f} s written to {out}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
