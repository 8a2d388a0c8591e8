"""Bounded load generator + 1 s /metrics scraper for a local vLLM server (127.0.0.1 only).

Writes OUT/<scenario>.jsonl (one scrape a line: {"t", "text"}, or {"t", "error"} when the scrape failed),
OUT/<scenario>.client.json (settings, load windows, client-side latencies) and OUT/<scenario>.metrics.txt.

A recording may have several phases run one after the other while the scraper keeps going, e.g.
    --phase concurrency=2,duration=60,out_max=64 --phase concurrency=24,duration=90,prompt_min=200
Each --phase overrides the top-level load options. Extra phase keys: pause=S (idle seconds before the phase),
wait_health=1 (then wait until GET /health answers 200, e.g. after a server restart).
List-valued options take '/'-separated values (commas separate phase keys): --models a/b spreads requests over
served model names (LoRA adapters), --dp-ranks 0/0/0/1 sends an X-data-parallel-rank header (worker i, or request i
in open loop, gets entry i mod len). --unique-head N puts N random words, unique per request, before the shared
prefix (a request ID or timestamp in a system prompt: defeats prefix caching). --greedy F sends a seeded share F of
requests with temperature 0 (else 1): on a random-weight model greedy output falls into a loop whose n-gram drafts
are accepted, so F sets how much speculative decoding pays. A failed request (server down) is
retried after 0.5 s, so a closed loop keeps going across a restart without spinning. --warmup sends one short
request and waits for it before the first scrape (0.16 took 18-45 s to serve its very first request).
"""

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import time

import aiohttp

VOCAB = 4092  # words w0..w4091, one token each (see make_model.py)
PHASE_KEYS = ["concurrency", "rate", "rate_to", "duration", "drain", "ramp", "prompt_min", "prompt_max"]
PHASE_KEYS += ["out_min", "out_max", "shared_prefix", "max_requests", "seed", "pause", "wait_health"]
PHASE_KEYS += ["unique_head", "models", "dp_ranks", "greedy"]
RETRY_PAUSE = 0.5


def words(rng, n):
    return " ".join(f"w{rng.randrange(VOCAB)}" for _ in range(n))


def read_cpu():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v), v[3] + v[4]


async def scraper(session, base, fh, stop_evt, cpu_log):
    last = read_cpu()
    while not stop_evt.is_set():
        t0 = time.time()
        try:
            async with session.get(base + "/metrics", timeout=aiohttp.ClientTimeout(total=5)) as r:
                r.raise_for_status()
                rec = {"t": t0, "text": await r.text()}
        except Exception as e:
            rec = {"t": t0, "error": f"{type(e).__name__}: {e}"[:300]}
        fh.write(json.dumps(rec) + "\n")
        fh.flush()
        cur = read_cpu()
        dt = cur[0] - last[0]
        cpu_log.append((round(t0, 3), round(100.0 * (1 - (cur[1] - last[1]) / dt), 1) if dt else None))
        last = cur
        await asyncio.sleep(max(0.0, 1.0 - (time.time() - t0)))


def pick(values, i):
    """Entry i (mod len) of a '/'-separated option, or None when it is empty."""
    vs = [v for v in str(values).split("/") if v]
    return vs[i % len(vs)] if vs else None


async def one_request(session, a, prompt, max_tokens, stats, i=0, greedy=False):
    model = pick(a.models, i) or a.model
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True}
    body.update(temperature=0.0 if greedy else 1.0, stream=True)
    rank = pick(a.dp_ranks, i)
    headers = {"X-data-parallel-rank": rank} if rank is not None else None
    t0 = time.time()
    ttft, n = None, 0
    try:
        async with session.post(
            a.base + "/v1/completions", json=body, headers=headers, timeout=aiohttp.ClientTimeout(total=600)
        ) as r:
            async for line in r.content:
                if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                    if ttft is None:
                        ttft = time.time() - t0
                    n += 1
            ok = r.status == 200
            err = None if ok else f"HTTP {r.status}"
    except asyncio.CancelledError:
        stats.append({"ok": False, "cancelled": True, "ttft": ttft, "e2e": time.time() - t0, "chunks": n})
        raise
    except Exception as e:
        ok, err = False, str(e)[:200]
    stats.append({"ok": ok, "err": err, "ttft": ttft, "e2e": time.time() - t0, "chunks": n, "model": model})
    if not ok:
        await asyncio.sleep(RETRY_PAUSE)


def make_prompt(rng, p, shared):
    prompt = words(rng, rng.randint(p.prompt_min, p.prompt_max))
    if shared:
        prompt = shared + " " + prompt
    if p.unique_head:  # its own RNG, so the rest of the prompt is the same with or without the head
        prompt = words(random.Random(time.time_ns()), p.unique_head) + " " + prompt
    return prompt


def greedy_picker(p, stream):
    """Whether each next request is sent greedy (temperature 0): a share p.greedy, from its own seeded RNG."""
    # apart from the prompt RNG: the same prompts and lengths with or without greedy requests
    rng = random.Random(f"greedy/{p.seed}/{stream}")
    return lambda: p.greedy > 0 and rng.random() < p.greedy


async def worker(wid, session, p, deadline, stats, counter):
    rng = random.Random(p.seed * 1000 + wid)
    greedy = greedy_picker(p, wid)
    shared = words(random.Random(p.seed), p.shared_prefix) if p.shared_prefix else None
    while time.time() < deadline and counter[0] < p.max_requests:
        counter[0] += 1
        prompt = make_prompt(rng, p, shared)
        await one_request(session, p, prompt, rng.randint(p.out_min, p.out_max), stats, wid, greedy())


async def open_loop(session, p, deadline, stats, counter):
    """Poisson arrivals at p.rate req/s, at most p.concurrency in flight (extra arrivals dropped)."""
    rng = random.Random(p.seed)
    greedy = greedy_picker(p, "open")
    inflight, dropped = set(), 0
    shared = words(random.Random(p.seed), p.shared_prefix) if p.shared_prefix else None
    start = time.time()
    while time.time() < deadline and counter[0] < p.max_requests:
        # with rate_to, the rate moves linearly from rate to rate_to over the phase (each gap drawn at the rate of
        # its start: a ramp's arrivals, not a level's)
        share = min(1.0, (time.time() - start) / p.duration) if p.duration else 0.0
        rate = p.rate + (p.rate_to - p.rate) * share if p.rate_to > 0 else p.rate
        await asyncio.sleep(rng.expovariate(rate))
        inflight = {t for t in inflight if not t.done()}
        if len(inflight) >= max(1, p.concurrency):
            dropped += 1
            continue
        counter[0] += 1
        prompt = make_prompt(rng, p, shared)
        n_out = rng.randint(p.out_min, p.out_max)
        coro = one_request(session, p, prompt, n_out, stats, counter[0] - 1, greedy())
        inflight.add(asyncio.create_task(coro))
    if inflight:
        await asyncio.gather(*inflight, return_exceptions=True)
    stats.append({"ok": None, "dropped_arrivals": dropped})


def pct(xs, p):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    return round(xs[min(len(xs) - 1, max(0, round(p / 100 * (len(xs) - 1))))], 4)


async def wait_health(session, base):
    while True:
        with contextlib.suppress(Exception):
            async with session.get(base + "/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                if r.status == 200:
                    return
        await asyncio.sleep(1)


async def run_phase(session, p):
    stats, counter = [], [0]
    await asyncio.sleep(p.pause)
    if p.wait_health:
        await wait_health(session, p.base)
    t_load = time.time()
    deadline = t_load + p.duration
    ws = []
    if p.rate > 0:
        ws.append(asyncio.create_task(open_loop(session, p, deadline, stats, counter)))
    for i in range(0 if p.rate > 0 else p.concurrency):
        ws.append(asyncio.create_task(worker(i, session, p, deadline, stats, counter)))
        if p.ramp:
            await asyncio.sleep(p.ramp)
    if not ws:  # no load: just scrape an idle server for the duration
        await asyncio.sleep(p.duration)
    else:
        _, pending = await asyncio.wait(ws, timeout=p.duration + p.drain)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    okv = [s for s in stats if s.get("ok")]
    return {
        "settings": {k: getattr(p, k) for k in PHASE_KEYS},
        "load_start": t_load,
        "load_end": time.time(),
        "requests_started": counter[0],
        "requests_ok": len(okv),
        "requests_failed_or_cancelled": len([s for s in stats if s.get("ok") is False]),
        "open_loop_dropped_arrivals": sum(s.get("dropped_arrivals", 0) for s in stats),
        "client_ttft_p50": pct([s["ttft"] for s in okv], 50),
        "client_ttft_p95": pct([s["ttft"] for s in okv], 95),
        "client_e2e_p50": pct([s["e2e"] for s in okv], 50),
        "client_e2e_p95": pct([s["e2e"] for s in okv], 95),
        "errors": [s.get("err") for s in stats if s.get("err")][:5],
        "requests_ok_by_model": {
            m: sum(1 for s in okv if s.get("model") == m) for m in sorted({s.get("model") for s in okv})
        },
    }


def phase_args(a, spec):
    p = argparse.Namespace(**vars(a))
    for item in filter(None, spec.split(",")):
        k, v = item.split("=", 1)
        k = k.strip().replace("-", "_")
        if k not in PHASE_KEYS:
            raise SystemExit(f"unknown phase key {k!r}; known: {', '.join(PHASE_KEYS)}")
        setattr(p, k, type(getattr(a, k))(v))
    return p


async def main(a):
    a.base = a.base.rstrip("/")
    os.makedirs(a.out, exist_ok=True)
    phases = [phase_args(a, s) for s in (a.phase or [""])]
    cpu_log, results = [], []
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        if a.warmup:
            t0 = time.time()
            await one_request(session, a, words(random.Random(0), 16), 4, [])
            print(f"warm-up request took {time.time() - t0:.1f} s", flush=True)
        stop_evt = asyncio.Event()
        with open(f"{a.out}/{a.scenario}.jsonl", "w") as fh:
            st = asyncio.create_task(scraper(session, a.base, fh, stop_evt, cpu_log))
            await asyncio.sleep(a.pre)
            for i, p in enumerate(phases):
                print(f"phase {i} start", flush=True)
                results.append(await run_phase(session, p))
                print(f"phase {i} end", json.dumps(results[-1]), flush=True)
            await asyncio.sleep(a.post)
            stop_evt.set()
            await st
        with contextlib.suppress(Exception):
            async with session.get(a.base + "/metrics") as r:
                final = await r.text()
            with open(f"{a.out}/{a.scenario}.metrics.txt", "w") as f:
                f.write(final)
    t_load, t_end = results[0]["load_start"], results[-1]["load_end"]
    busy = [c for t, c in cpu_log if c is not None and t_load <= t <= t_end]
    summ = {"scenario": a.scenario, "args": {k: v for k, v in vars(a).items() if k != "phase"}}
    summ.update(load_start=t_load, load_end=t_end, phases=results)
    summ["host_cpu_busy_pct_mean_during_load"] = round(statistics.mean(busy or [0]), 1)
    summ["host_cpu_busy_pct_series"] = cpu_log
    with open(f"{a.out}/{a.scenario}.client.json", "w") as f:
        json.dump(summ, f, indent=1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("scenario")
    ap.add_argument("--base", default="http://127.0.0.1:8000", help="vLLM server (loopback only)")
    ap.add_argument("--out", default=".", help="folder for <scenario>.jsonl, .metrics.txt, .client.json")
    ap.add_argument("--model", default="tiny", help="served model name")
    ap.add_argument("--concurrency", type=int, default=0, help="closed-loop workers / open-loop cap")
    ap.add_argument("--rate", type=float, default=0.0, help="open-loop Poisson req/s (0 = closed loop)")
    ap.add_argument("--rate-to", type=float, default=0.0, help="open loop: the rate at the phase's end")
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--drain", type=float, default=30, help="max s to wait for in-flight after duration")
    ap.add_argument("--pre", type=float, default=5, help="idle scrapes before the first phase")
    ap.add_argument("--post", type=float, default=5, help="idle scrapes after the last phase")
    ap.add_argument("--ramp", type=float, default=0.0, help="s between worker starts")
    ap.add_argument("--prompt-min", type=int, default=100)
    ap.add_argument("--prompt-max", type=int, default=200)
    ap.add_argument("--out-min", type=int, default=32)
    ap.add_argument("--out-max", type=int, default=64)
    ap.add_argument("--shared-prefix", type=int, default=0, help="same N-word prefix on every prompt")
    ap.add_argument("--max-requests", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--pause", type=float, default=0.0, help="(phase key) idle s before the phase")
    ap.add_argument("--wait-health", type=int, default=0, help="(phase key) wait for /health first")
    ap.add_argument("--unique-head", type=int, default=0, help="N random words unique to each request, first")
    ap.add_argument("--models", default="", help="served model names to spread requests over, a/b/c")
    ap.add_argument("--dp-ranks", default="", help="X-data-parallel-rank per worker (or request), 0/0/1")
    ap.add_argument("--greedy", type=float, default=0.0, help="share of requests sent greedy (temperature 0)")
    ap.add_argument("--warmup", action="store_true", help="one short request before the first scrape")
    ap.add_argument("--phase", action="append", help="key=value,... overriding options (repeatable)")
    asyncio.run(main(ap.parse_args()))
