"""Synthetic Diagnosis sequences: healthy → KV-cache bound → healthy, one every 15 s."""

from __future__ import annotations

from kvdoctor.verdicts import Advice, Diagnosis, Finding

T0 = 1_760_000_000.0
TARGET, MODEL = "vllm-a:8000", "meta-llama/Llama-3.1-8B-Instruct"
KV_ADVICE = [
    Advice(
        "--gpu-memory-utilization 0.95",
        "+2,048 KV blocks (+18 % KV capacity, ≈ 32k more tokens)",
        "cache_config_info",
    ),
    Advice(
        "--max-num-seqs 48", "caps concurrency below the 51 sequences the KV cache holds at 2.1k tokens each"
    ),
]


def kv_finding(i: int, since: float) -> Finding:
    """The KV-cache limit finding at step i of the incident (numbers drift, severity escalates late)."""
    usage = min(0.99, 0.93 + 0.005 * i)
    waiting = 4.0 if i < 10 else 12.0
    return Finding(
        name="kv_cache",
        severity="warning" if i < 16 else "critical",
        summary=f"KV cache {usage * 100:.0f} % full with {waiting:.0f} requests waiting",
        description="Requests queue because the KV cache has no free blocks; the batch cap is not reached.",
        evidence={
            "kv_usage_max_1m": usage,
            "running": 42.0,
            "batch_cap_configured": 256.0,
            "waiting": waiting,
            "preemptions_per_s": 0.4,
            "ttft_p95_s": 1.2,
            "itl_p95_s": 0.045,
            "prefix_cache_hit_ratio": 0.31,
        },
        advice=list(KV_ADVICE),
        runbook="https://example.invalid/runbook#kv-cache",
        bottleneck="kv_cache",
        since=since,
    )


def storm(since: float) -> Finding:
    """A preemption storm finding riding along with the KV limit."""
    return Finding(
        "preemption_storm",
        "warning",
        "1.5 preemptions/s",
        evidence={"preemptions_per_s": 1.5},
        advice=[Advice("--gpu-memory-utilization 0.95", "fewer preemptions")],
        since=since,
    )


def kv_incident(
    healthy_before: int = 8,
    bound: int = 24,
    healthy_after: int = 12,
    step: float = 15.0,
    storm_at: tuple[int, int] = (8, 14),
) -> list[Diagnosis]:
    """healthy_before + bound + healthy_after cycles (default 44 × 15 s = 11 min), one Diagnosis each."""
    out = []
    start = T0 + healthy_before * step
    for n in range(healthy_before + bound + healthy_after):
        t = T0 + n * step
        i = n - healthy_before
        if 0 <= i < bound:
            findings = [kv_finding(i, start)]
            if storm_at[0] <= i < storm_at[1]:
                findings.append(storm(start + storm_at[0] * step))
            out.append(Diagnosis(TARGET, MODEL, t, "kv_cache", start, findings))
        else:
            out.append(Diagnosis(TARGET, MODEL, t, "healthy", T0, []))
    return out
