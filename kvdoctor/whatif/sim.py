"""A discrete-step simulation of vLLM's V1 scheduler (`Scheduler.schedule`, FCFS) and its block-based KV cache.

Running requests first in admission order, chunked prefill under `max_num_batched_tokens`, at most `max_num_seqs`
running, blocks of `block_size` allocated on demand, preemption of the most recently admitted request (blocks freed,
computed tokens reset to 0, back to the front of the queue), no admission in a step that preempted, head-of-line
blocking when the queue's head cannot get blocks, prefix-cache hits on full blocks. Decoding requests advance in
lockstep, so the loop touches a decoding request only when it needs a new block or finishes.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque

from kvdoctor.whatif.blocks import BlockPool
from kvdoctor.whatif.model import Engine, Request, SimResult, StepModel, Workload, make_request


class Simulator:
    """Runs one engine with a step-time model; deterministic for a given seed."""

    def __init__(self, engine: Engine, step: StepModel, *, prefix_hit_ratio: float = 0.0) -> None:
        self.e, self.step = engine, step
        self.prefix_hit_ratio = prefix_hit_ratio
        # per step, when a list: (start time, decoding, prefill tokens, admitted, preempted, waiting, blocks used)
        self.trace: list[tuple[float, int, int, int, bool, int, int]] | None = None

    def run_workload(self, w: Workload, duration_s: float, warmup_s: float, seed: int = 0) -> SimResult:
        """Simulate warmup_s + duration_s of the workload; metrics cover the last duration_s."""
        rng = random.Random(seed)
        shared = round(self.prefix_hit_ratio * w.prompt.mean / self.e.block_size) * self.e.block_size
        arrivals: list[tuple[float, int, Request]] = []
        if w.kind == "open":
            t, n = 0.0, 0
            while w.rate_per_s > 0:
                t += rng.expovariate(w.rate_per_s)
                if t > warmup_s + duration_s:
                    break
                arrivals.append((t, n, make_request(rng, w, t, shared, self.e)))
                n += 1
        else:
            for i in range(w.population):
                t0 = rng.random() * max(w.think_s, 0.01)
                arrivals.append((t0, i, make_request(rng, w, t0, shared, self.e, client=i)))
        return self.run(arrivals, duration_s, warmup_s, w, rng, shared)

    def run(
        self,
        arrivals: list[tuple[float, int, Request]],
        duration_s: float,
        warmup_s: float = 0.0,
        workload: Workload | None = None,
        rng: random.Random | None = None,
        shared: int = 0,
    ) -> SimResult:
        """Simulate the given arrivals (a closed-loop workload re-issues from rng); metrics after warmup_s."""
        e, sm = self.e, self.step
        bs, budget_max, max_seqs = e.block_size, e.max_num_batched_tokens, e.max_num_seqs
        r, k = e.accepted_per_step, e.draft_tokens
        c0, c_dec, c_pre, c_kv, c_attn = sm.c0, sm.c_decode, sm.c_prefill, sm.c_kv, sm.c_attn
        usable = e.usable_blocks
        shared_b = shared // bs
        closed = workload is not None and workload.kind == "closed"
        heapq.heapify(arrivals)
        tie = len(arrivals)
        end = warmup_s + duration_s
        res = SimResult(span_s=duration_s)
        waiting: deque[Request] = deque()
        dec: list[Request] = []
        pre: list[Request] = []
        blk_ev: dict[int, list[tuple[int, Request, int]]] = {}
        fin_ev: dict[int, list[tuple[Request, int]]] = {}
        pool = BlockPool(usable)
        shared_refs = 0
        ctx = 0.0  # Σ computed tokens of decoding requests
        t, g, seq = 0.0, 0, 0
        next_scrape = warmup_s

        def schedule_events(q: Request) -> None:
            gf = q.g0 + math.ceil((q.out - q.gen0) / r - 1e-9) - 1
            fin_ev.setdefault(gf, []).append((q, q.ver))
            cap = (q.nb + q.hit // bs) * bs
            gb = q.g0 + max(0, math.floor((cap - 1 - k - q.c0) / r + 1e-9) + 1)
            if gb <= gf:
                blk_ev.setdefault(gb, []).append((q.seq, q, q.ver))

        def preempt(q: Request) -> None:
            nonlocal shared_refs, ctx
            if pre and pre[-1] is q:
                pre.pop()
                cur = q.c
            else:
                dec.pop()
                cur = int(q.c0 + (g - q.g0) * r)
                ctx -= cur
                q.gen = int(q.gen0 + (g - q.g0) * r)
            cached = min(q.nb, max(0, cur // bs - q.hit // bs))  # full blocks only; the partial one is lost
            q.seg = pool.release(q.nb, q, cached)
            if q.hit:
                shared_refs -= 1
                if shared_refs == 0:
                    pool.release(shared_b)
            q.nb, q.c, q.ver = 0, 0, q.ver + 1
            waiting.appendleft(q)
            if t >= warmup_s:
                res.preemptions += 1

        preempted = False  # set when a step preempted: then nothing is admitted in it

        def make_room(q: Request, need: int) -> bool:
            # preempt the most recently admitted until need blocks are free; False when q itself was the victim
            nonlocal preempted
            while need > pool.free:
                victim = pre[-1] if pre else dec[-1]
                preempt(victim)
                preempted = True
                if victim is q:
                    return False
            return True

        def reissue(q: Request) -> None:
            nonlocal tie
            if closed and workload is not None and rng is not None:
                nxt_t = t + workload.think_s
                heapq.heappush(
                    arrivals, (nxt_t, tie, make_request(rng, workload, nxt_t, shared, e, q.client))
                )
                tie += 1

        while t < end:
            while arrivals and arrivals[0][0] <= t:
                q = heapq.heappop(arrivals)[2]
                if q.prompt + q.out > e.max_model_len:
                    res.rejected += 1  # vLLM answers 400: prompt + max_tokens over max_model_len
                    reissue(q)
                else:
                    waiting.append(q)
            if not dec and not pre and not waiting:
                if not arrivals:
                    break
                nxt = min(arrivals[0][0], end)
                while next_scrape <= nxt:
                    res.kv_samples.append(0.0)
                    next_scrape += 1.0
                t = nxt
                continue
            budget = budget_max
            preempted = False
            # 1. running decoders, oldest first: only those crossing a block boundary need the allocator
            n_dec = len(dec)
            budget -= n_dec * (1 + k)
            due = blk_ev.pop(g, None)
            if due:
                due.sort(key=lambda x: x[0])
                for _, q, ver in due:
                    if q.ver != ver:
                        continue
                    cur = q.c0 + (g - q.g0) * r
                    need = math.ceil((cur + 1 + k) / bs) - q.hit // bs - q.nb
                    if not make_room(q, need):
                        break
                    q.nb += need
                    pool.take(need)
                    schedule_blocks = q.g0 + max(0, math.floor(((q.nb + q.hit // bs) * bs - 1 - k
                                                                 - q.c0) / r + 1e-9) + 1)  # fmt: skip
                    blk_ev.setdefault(max(schedule_blocks, g + 1), []).append((q.seq, q, q.ver))
                n_dec = len(dec)
                budget = budget_max - n_dec * (1 + k)
            # 2. running requests still prefilling (always the youngest), each a chunk of what budget remains
            i = 0
            while i < len(pre) and budget > 0:
                q = pre[i]
                chunk = min(q.prompt + q.gen - q.c, budget)
                need = math.ceil((q.c + chunk) / bs) - q.hit // bs - q.nb
                if not make_room(q, need):
                    break
                q.nb += need
                pool.take(need)
                q.chunk = chunk
                budget -= chunk
                i += 1
            n_pre = i
            for q in pre[n_pre:]:
                q.chunk = 0
            done: list[Request] = []
            # 3. the queue, only if nothing was preempted; its head blocks everyone behind it
            n_running = n_pre
            if not preempted:
                while waiting and budget > 0 and len(dec) + len(pre) < max_seqs:
                    q = waiting[0]
                    hit_b = q.hit // bs
                    total = q.prompt + q.gen
                    seg = q.seg
                    own = (
                        min(seg.blocks, (total - 1) // bs - hit_b)
                        if seg is not None and seg.owner is q
                        else 0
                    )
                    q.c = q.hit + max(0, own) * bs
                    chunk = min(total - q.c, budget)
                    need = max(0, math.ceil((q.c + chunk) / bs) - hit_b - own)
                    extra = shared_b if hit_b and shared_refs == 0 else 0
                    if need + extra + own > pool.free:
                        q.c = 0
                        if not dec and not pre:
                            waiting.popleft()  # can never fit: vLLM would refuse it
                            res.rejected += 1
                            reissue(q)
                            continue
                        break
                    waiting.popleft()
                    own = pool.rehit(seg, q, own)
                    pool.take(need + extra)
                    q.seg = None
                    if hit_b:
                        shared_refs += 1
                    q.nb, q.chunk, q.seq = need + own, chunk, seq
                    seq += 1
                    if q.scheduled < 0:
                        q.scheduled = t
                        if t >= warmup_s:
                            res.queue.append(t - q.arrival)
                    pre.append(q)
                    budget -= chunk
                    n_pre += 1
            # 4. the step's duration and its effects
            prefill_tokens = 0
            pctx = 0
            pairs = 0.0
            for q in pre[:n_pre]:
                prefill_tokens += q.chunk
                pctx += q.c + q.chunk
                pairs += q.chunk * (q.c + q.chunk / 2)
            d = c0 + c_dec * n_dec + c_pre * prefill_tokens + c_kv * (ctx + pctx) + c_attn * pairs
            if self.trace is not None:
                self.trace.append(
                    (t, n_dec, prefill_tokens, n_pre - n_running, preempted, len(waiting), pool.used)
                )
            t += d
            g += 1
            ctx += n_dec * r
            inspan = t >= warmup_s and t <= end
            if inspan:
                res.steps += 1
                d_in = min(d, t - warmup_s)
                res.running_area += (n_dec + len(pre)) * d_in
                res.waiting_area += len(waiting) * d_in
                res.running_max = max(res.running_max, n_dec + len(pre))
                if n_dec:
                    res.itl.append((d, n_dec))
                    res.generation_tokens += n_dec * r
            for q, ver in fin_ev.pop(g - 1, ()):
                if q.ver == ver:
                    done.append(q)
            moved = []
            for q in pre[:n_pre]:
                q.c += q.chunk
                if q.c >= q.prompt + q.gen:
                    if q.gen == 0 and inspan:
                        res.ttft.append(t - q.arrival)
                    elif inspan:
                        res.itl.append((t - q.last, 1))
                    q.gen += 1
                    q.last = t
                    if inspan:
                        res.generation_tokens += 1
                    moved.append(q)
            for q in moved:
                pre.remove(q)
                if q.gen >= q.out:
                    done.append(q)
                    continue
                q.g0, q.c0, q.gen0 = g, float(q.c), float(q.gen)
                dec.append(q)
                ctx += q.c
                schedule_events(q)
            for q in done:
                if q in dec:
                    dec.remove(q)
                    ctx -= q.c0 + (g - q.g0) * r
                pool.release(q.nb)
                if q.hit:
                    shared_refs -= 1
                    if shared_refs == 0:
                        pool.release(shared_b)
                q.nb, q.ver = 0, q.ver + 1
                if inspan:
                    res.finished += 1
                reissue(q)
            while next_scrape <= t and next_scrape <= end:
                res.kv_samples.append(pool.used / usable)
                next_scrape += 1.0
        return res
