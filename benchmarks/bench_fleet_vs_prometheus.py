"""CPU per target-cycle of `kvdoctor serve` beside Prometheus 2.42, side by side, on the same loopback vLLM fleet.

usage: python benchmarks/bench_fleet_vs_prometheus.py [--targets 300] [--seconds 60] [--warmup 45] [--interval 5]
           [--servers 4] [--scenarios healthy,limit] [--slo] [--quick] [--profile DIR] [--keep DIR]

For each scenario, --servers `kvdoctor replay-server --loop` processes serve a real vLLM 0.32 exposition from the
shared recordings (`healthy`: healthy.jsonl.gz; `limit`: compute_bound and kv_bound, alternately, so every target
is at a limit), and --targets loopback targets (`?i=K` on those servers) are scraped every --interval seconds by
  (a) Debian's `prometheus` with the pack exported by `kvdoctor rules export --interval <interval>`, and
  (b) `kvdoctor serve` with the same targets and its shipped pack (its advisor and, with --slo, headroom on),
both at once. After --warmup seconds (the advisor starts simulating once 30 s of steady load are in), each
process's CPU seconds (utime + stime of /proc/PID/stat, every thread, and its children: kvdoctor simulates in one)
are read at the start and the end of the same --seconds wall window and divided by the target-cycles it did:
Prometheus' own scrape count
(prometheus_target_interval_length_seconds_count), kvdoctor's cycles (the window's slots less the missed ones)
times the targets. A process that misses cycles looks cheap per cycle that ran (its skipped work is not in the
divisor), so each is also divided by the window's scrape slots (targets × window / interval), the honest figure
when kvdoctor falls behind. Prints ms of CPU per target-cycle for each, both ways, the ratios, kvdoctor's what-if
counters over the window (simulated, shared, kept), and the load average (the machine is shared: compare the ratio, measured in one window). --profile DIR runs kvdoctor
under benchmarks/sampling_profile.py, writes its hottest functions to DIR/<scenario>.txt and prints its CPU in the
window by thread (cycle, scrape, parse, what-if worker; the simulation child apart).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from fleet_data import recording_dir  # noqa: E402
from procs import TICK, cpu_s, free_port, get, metric_sum, wait_for  # noqa: E402

SCENARIOS = {"healthy": ("healthy",), "limit": ("compute_bound", "kv_bound")}
OUTCOMES = ("computed", "shared", "kept")


def start_servers(
    recs: tuple[str, ...], n: int, log: Path
) -> tuple[list[int], list[subprocess.Popen[bytes]]]:
    """n replay servers, recordings assigned in turn; their ports and processes."""
    src = recording_dir()
    ports = [free_port() for _ in range(n)]
    procs = []
    for i, port in enumerate(ports):
        rec = src / f"{recs[i % len(recs)]}.jsonl.gz"
        cmd = [
            sys.executable,
            "-m",
            "kvdoctor",
            "replay-server",
            str(rec),
            "--loop",
            "--from",
            "40",
            "--listen",
            f"127.0.0.1:{port}",
        ]
        procs.append(subprocess.Popen(cmd, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT))
    for port in ports:
        wait_for(f"replay server on {port}", lambda p=port: get(f"http://127.0.0.1:{p}/metrics"), 60)
    return ports, procs


def targets(ports: list[int], n: int) -> list[tuple[str, int, int]]:
    """(name, port, index) per target: target i on server i mod len(ports)."""
    return [(f"t{i:05d}", ports[i % len(ports)], i) for i in range(n)]


def prometheus_config(tmp: Path, fleet: list[tuple[str, int, int]], interval: float) -> Path:
    """prometheus.yml scraping the fleet (instance = the target's name, as kvdoctor labels it) with the pack."""
    rules = tmp / "kvdoctor-rules.yml"
    out = subprocess.run(
        [sys.executable, "-m", "kvdoctor", "rules", "export", "--interval", f"{interval:g}s"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    rules.write_text(out.stdout)
    lines = [
        "global:",
        f"  scrape_interval: {interval:g}s",
        f"  evaluation_interval: {interval:g}s",
        f"  scrape_timeout: {max(1.0, interval - 1):g}s",
        f"rule_files: ['{rules}']",
        "scrape_configs:",
        "  - job_name: vllm",
        "    static_configs:",
    ]
    for name, port, i in fleet:  # __param_i sets ?i= on the URL, as kvdoctor's targets have it
        lines.append(
            f"      - {{targets: ['127.0.0.1:{port}'], labels: {{__param_i: '{i}', instance: {name}}}}}"
        )
    path = tmp / "prometheus.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def kvdoctor_config(
    tmp: Path, fleet: list[tuple[str, int, int]], interval: float, port: int, slo: bool
) -> Path:
    """kvdoctor.yml watching the same fleet."""
    lines = [f"interval: {interval:g}s", f"listen: 127.0.0.1:{port}", "targets:"]
    extra = ", slo: {ttft_p95: 2s, itl_p95: 200ms}" if slo else ""
    for name, p, i in fleet:
        lines.append(f"  - {{url: 'http://127.0.0.1:{p}/metrics?i={i}', name: {name}{extra}}}")
    path = tmp / "kvdoctor.yml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run(scenario: str, args: argparse.Namespace, tmp: Path) -> dict[str, object]:
    """One scenario: both scrapers side by side over one window; their CPU per target-cycle."""
    log = tmp / f"{scenario}.log"
    ports, servers = start_servers(SCENARIOS[scenario], args.servers, log)
    fleet = targets(ports, args.targets)
    prom_port, kvd_port = free_port(), free_port()
    prom_cfg = prometheus_config(tmp, fleet, args.interval)
    kvd_cfg = kvdoctor_config(tmp, fleet, args.interval, kvd_port, args.slo)
    storage = tmp / f"tsdb-{scenario}"
    prom_cmd = [
        shutil.which("prometheus") or "prometheus",
        f"--config.file={prom_cfg}",
        f"--storage.tsdb.path={storage}",
        f"--web.listen-address=127.0.0.1:{prom_port}",
        "--log.level=warn",
    ]
    kvd_cmd = [sys.executable, "-m", "kvdoctor", "serve", "--config", str(kvd_cfg), "--log-format", "json"]
    if args.profile:
        out = Path(args.profile) / f"{scenario}.txt"
        kvd_cmd = [
            sys.executable,
            str(ROOT / "benchmarks" / "sampling_profile.py"),
            str(out),
            "--",
            *kvd_cmd[3:],
        ]
    procs = servers
    try:
        prom = subprocess.Popen(prom_cmd, cwd=tmp, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        kvd = subprocess.Popen(kvd_cmd, cwd=ROOT, stdout=log.open("ab"), stderr=subprocess.STDOUT)
        procs = [*servers, prom, kvd]
        prom_url, kvd_url = f"http://127.0.0.1:{prom_port}", f"http://127.0.0.1:{kvd_port}"
        n = args.targets
        up = f"{prom_url}/api/v1/query?query=count(up%3D%3D1)"
        wait_for(
            "Prometheus to scrape every target",
            lambda: (r := json.loads(get(up))["data"]["result"]) and int(float(r[0]["value"][1])) >= n,
            120 + 4 * args.interval,
        )
        wait_for(
            "kvdoctor to scrape every target",
            lambda: metric_sum(get(f"{kvd_url}/metrics"), "kvdoctor_target_up") >= n,
            120,
        )
        # a benchmark on the wall clock: the advisor's first simulations start in here
        time.sleep(args.warmup)
        p0, k0 = get(f"{prom_url}/metrics"), get(f"{kvd_url}/metrics")
        c0, w0, th0 = (cpu_s(prom.pid), cpu_s(kvd.pid)), time.monotonic(), thread_cpu(kvd.pid, args, scenario)
        time.sleep(args.seconds)
        c1, w1, th1 = (cpu_s(prom.pid), cpu_s(kvd.pid)), time.monotonic(), thread_cpu(kvd.pid, args, scenario)
        p1, k1 = get(f"{prom_url}/metrics"), get(f"{kvd_url}/metrics")
        load = Path("/proc/loadavg").read_text().split()[:3]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    wall = w1 - w0
    scrapes = "prometheus_target_interval_length_seconds_count"
    prom_tc = metric_sum(p1, scrapes) - metric_sum(p0, scrapes)
    missed = metric_sum(k1, "kvdoctor_scheduler_events_total", 'event="missed"') - metric_sum(
        k0, "kvdoctor_scheduler_events_total", 'event="missed"'
    )
    kvd_tc = n * max(1.0, wall / args.interval - missed)
    prom_ms, kvd_ms = (c1[0] - c0[0]) / prom_tc * 1e3, (c1[1] - c0[1]) / kvd_tc * 1e3
    slots = n * wall / args.interval  # what both were asked to do in the window, done or not
    prom_slot, kvd_slot = (c1[0] - c0[0]) / slots * 1e3, (c1[1] - c0[1]) / slots * 1e3
    whatif0, whatif1 = _whatif(k0), _whatif(k1)
    # the window's simulations (counters: end less start; the queue's length at the end)
    whatif = {k: v - (0.0 if k.endswith("queue_length") else whatif0.get(k, 0.0)) for k, v in whatif1.items()}
    return {
        "scenario": scenario,
        "targets": n,
        "wall_s": round(wall, 1),
        "load_avg": load,
        "prometheus_ms_per_target_cycle": round(prom_ms, 3),
        "prometheus_target_cycles": prom_tc,
        "kvdoctor_ms_per_target_cycle": round(kvd_ms, 3),
        "kvdoctor_target_cycles": kvd_tc,
        "kvdoctor_missed_slots": missed,
        "ratio_kvdoctor_to_prometheus": round(kvd_ms / prom_ms, 3),
        "scrape_slots": round(slots),
        "prometheus_ms_per_slot": round(prom_slot, 3),
        "kvdoctor_ms_per_slot": round(kvd_slot, 3),
        "ratio_per_slot": round(kvd_slot / prom_slot, 3),
        "kvdoctor_cycle_duration_s": metric_sum(k1, "kvdoctor_cycle_duration_seconds"),
        "prometheus_rule_eval_failures": metric_sum(p1, "prometheus_rule_evaluation_failures_total"),
        "kvdoctor_whatif": whatif,
        # with --profile: kvdoctor's CPU in the window by thread, ms per target-cycle (the child's is not a thread)
        "kvdoctor_ms_per_target_cycle_by_thread": {
            k: round((v - th0.get(k, 0.0)) / kvd_tc * 1e3, 3) for k, v in sorted(th1.items())
        },
    }


def thread_cpu(pid: int, args: argparse.Namespace, scenario: str) -> dict[str, float]:
    """CPU seconds of each of kvdoctor's threads by name, when it runs under the profiler (which names them)."""
    if not args.profile:
        return {}
    try:
        names = json.loads((Path(args.profile) / f"{scenario}.tids.json").read_text())
    except (OSError, ValueError):
        return {}
    out: dict[str, float] = {}
    for tid, name in names.items():
        try:
            f = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # a thread that ended
        out[name] = out.get(name, 0.0) + (int(f[11]) + int(f[12])) / TICK
    return out


def _whatif(metrics: str) -> dict[str, float]:
    """kvdoctor's what-if and headroom workers' counters (simulations computed, shared, kept; dropped; queue)."""
    return {
        m.group(1): float(m.group(2))
        for m in re.finditer(r"^(kvdoctor_(?:whatif|headroom)_[a-z_]+(?:\{[^}]*\})?) (\S+)$", metrics, re.M)
    }


def main() -> int:
    """Run the scenarios and print one JSON line each, then a table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=300)
    ap.add_argument("--seconds", type=float, default=60.0, help="the measured window")
    ap.add_argument("--warmup", type=float, default=45.0, help="after every target is up, before measuring")
    ap.add_argument("--interval", type=float, default=5.0)
    ap.add_argument("--servers", type=int, default=4)
    ap.add_argument("--scenarios", default="healthy,limit")
    ap.add_argument("--slo", action="store_true", help="give every target SLOs (headroom computed too)")
    ap.add_argument(
        "--quick", action="store_true", help="a CI-size smoke run: 20 targets, 15 s, 35 s warm-up"
    )
    ap.add_argument("--profile", metavar="DIR", help="profile kvdoctor (sampling) into DIR/<scenario>.txt")
    ap.add_argument("--keep", metavar="DIR", help="keep the configs and logs here")
    args = ap.parse_args()
    if args.quick:
        args.targets, args.seconds, args.warmup, args.servers = 20, 15.0, 35.0, 2
    if shutil.which("prometheus") is None:
        print("needs `prometheus` on PATH (Debian: apt-get install prometheus)", file=sys.stderr)
        return 2
    if args.profile:
        Path(args.profile).mkdir(parents=True, exist_ok=True)
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="fleet-vs-prom-"))
    tmp.mkdir(parents=True, exist_ok=True)
    rows = []
    for scenario in args.scenarios.split(","):
        row = run(scenario, args, tmp)
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(
        f"\nms of CPU per target-cycle: per cycle that ran | per scrape slot (targets x window / interval)\n"
        f"{'scenario':9s} {'targets':>7s} {'prometheus':>10s} {'kvdoctor':>8s} {'ratio':>6s} | {'prometheus':>10s} "
        f"{'kvdoctor':>8s} {'ratio':>6s}  {'kvd missed':>10s}  load avg"
    )
    for r in rows:
        print(
            f"{r['scenario']!s:9s} {r['targets']!s:>7s} {r['prometheus_ms_per_target_cycle']!s:>10s} "
            f"{r['kvdoctor_ms_per_target_cycle']!s:>8s} {r['ratio_kvdoctor_to_prometheus']!s:>6s} | "
            f"{r['prometheus_ms_per_slot']!s:>10s} {r['kvdoctor_ms_per_slot']!s:>8s} {r['ratio_per_slot']!s:>6s}  "
            f"{r['kvdoctor_missed_slots']!s:>10s}  {' '.join(r['load_avg'])}"  # type: ignore[arg-type]
        )
    for r in rows:
        sims = r["kvdoctor_whatif"]  # type: ignore[index]
        n = {o: int(sims.get(f'kvdoctor_whatif_simulations_total{{outcome="{o}"}}', 0)) for o in OUTCOMES}  # type: ignore[attr-defined]
        print(
            f"{r['scenario']}: kvdoctor / Prometheus CPU per target-cycle = {r['ratio_kvdoctor_to_prometheus']}x "
            f"({r['kvdoctor_ms_per_target_cycle']} / {r['prometheus_ms_per_target_cycle']} ms); what-if in the "
            f"window: {n['computed']} simulated, {n['shared']} shared, {n['kept']} kept; load {' '.join(r['load_avg'])}"  # type: ignore[arg-type]
        )
        if by := r["kvdoctor_ms_per_target_cycle_by_thread"]:
            print(f"  kvdoctor ms per target-cycle by thread: {by}")
    if not args.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
