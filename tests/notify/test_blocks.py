"""Block Kit rendering: evidence for humans, advice with flags, links, resolved duration, Slack limits."""

from __future__ import annotations

from dataclasses import replace

from kvdoctor import fmt
from kvdoctor.notify.alerts import AdviceView, Event
from kvdoctor.notify.blocks import Links, event_message, probe_message
from kvdoctor.notify.config import NotifyConfig
from kvdoctor.notify.lifecycle import Lifecycle
from tests.notify_support.diagnoses import kv_incident

LINKS = Links("http://kvdoctor:9400", "http://grafana/d/kvdoctor")


def events() -> list[Event]:
    lc = Lifecycle(NotifyConfig())
    return [e for d in kv_incident() for e in lc.observe([d], d.t)]


def test_human_numbers() -> None:
    assert fmt.value("kv_usage_max_1m", 0.934) == "93 %"
    assert fmt.value("preemptions_per_s", 0.4) == "0.4/s"
    assert fmt.value("ttft_p95_s", 1.23) == "1.2 s"
    assert fmt.value("itl_p95_s", 0.045) == "45 ms"
    assert fmt.value("waiting", 12.0) == "12"
    assert fmt.value("generation_tokens_per_s", 12345.0) == "12k tok/s"
    assert fmt.value("something_new", float("nan")) == "n/a"
    assert fmt.duration(450) == "7m 30s" and fmt.duration(4 * 3600) == "4h 0m" and fmt.duration(59) == "59s"


def test_firing_root() -> None:
    text, blocks = event_message(events()[0], LINKS)
    assert text.startswith("KV cache full on vllm-a:8000 · meta-llama/Llama-3.1-8B-Instruct: KV cache 95 %")
    assert blocks[0]["type"] == "header" and "KV cache full · vllm-a:8000" in blocks[0]["text"]["text"]
    fields = next(b for b in blocks if "fields" in b)["fields"]
    shown = [f["text"] for f in fields]
    assert shown[:3] == ["*Running / cap*\n42 / 256", "*KV usage, 1m peak*\n95 %", "*Waiting*\n4"]
    assert (
        "*Preemptions*\n0.4/s" in shown
        and "*TTFT p95*\n1.2 s" in shown
        and "*Prefix-cache hit rate*\n31 %" in shown
    )
    advice = next(
        b for b in blocks if b["type"] == "section" and "What to change" in b.get("text", {}).get("text", "")
    )
    assert "`--gpu-memory-utilization 0.95`: +2,048 KV blocks (+18 % KV capacity" in advice["text"]["text"]
    ctx = blocks[-1]["elements"][0]["text"]
    assert (
        "<http://kvdoctor:9400/?target=vllm-a%3A8000&model_name=meta-llama%2FLlama-3.1-8B-Instruct|Status page>"
        in ctx
    )
    assert "http://grafana/d/kvdoctor?var-target=vllm-a%3A8000" in ctx and "|Runbook>" in ctx


def test_update_reply_and_resolved() -> None:
    evs = events()
    upd = next(e for e in evs if e.kind == "update")
    text, blocks = event_message(upd, LINKS, root=False)
    assert blocks[0]["type"] == "section" and "Changed:" in blocks[0]["text"]["text"]
    text, blocks = event_message(evs[-1], LINKS)
    assert text == "Resolved: KV cache full on vllm-a:8000 · meta-llama/Llama-3.1-8B-Instruct (lasted 5m 45s)"
    assert blocks[0]["text"]["text"].startswith("✅ Resolved: KV cache full")
    assert "lasted *5m 45s*" in blocks[-1]["elements"][0]["text"]
    assert not any("What to change" in str(b) for b in blocks)


def test_limits_hold_for_oversized_input() -> None:
    ev = events()[0]
    a = replace(
        ev.alerts[0],
        evidence={f"metric_{i}_seconds": float(i) for i in range(30)},
        summary="x" * 5000,
        advice=tuple(AdviceView(f"--flag-{i}", "y" * 400) for i in range(40)),
        model_name="m" * 300,
    )
    ev.alerts = [a, *(replace(a, finding=f"f{i}", bottleneck="", status="firing") for i in range(60))]
    text, blocks = event_message(ev, LINKS)  # validated by slack_sdk.models.blocks inside event_message
    assert len(blocks) <= 50 and len(blocks[0]["text"]["text"]) <= 150
    assert len(next(b for b in blocks if "fields" in b)["fields"]) == 10
    assert all(len(b.get("text", {}).get("text", "")) <= 3000 for b in blocks if b["type"] == "section")
    assert len(text) <= 3000


def test_test_message() -> None:
    text, blocks = probe_message(LINKS)
    assert "test notification" in text and blocks[0]["type"] == "header"
