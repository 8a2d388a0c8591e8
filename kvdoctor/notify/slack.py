"""Slack sink through slack-sdk: bot token (threads, chat.update on resolve) or incoming webhook."""

from __future__ import annotations

from dataclasses import replace

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import ConnectionErrorRetryHandler, RateLimitErrorRetryHandler, RetryHandler
from slack_sdk.http_retry.builtin_handlers import ServerErrorRetryHandler
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator
from slack_sdk.webhook import WebhookClient

from kvdoctor.jsondoc import JsonObject
from kvdoctor.notify.alerts import Event
from kvdoctor.notify.blocks import Links, event_message, probe_message
from kvdoctor.notify.config import SlackConfig
from kvdoctor.notify.outbox import Item, Outbox
from kvdoctor.notify.redact import describe_error, redact, redacting_logger
from kvdoctor.notify.worker import Result

log = redacting_logger("kvdoctor.notify.slack")
# slack-sdk logs request URLs (a webhook URL is a secret) and retries: route it through a redacting logger.
sdk_log = redacting_logger("kvdoctor.notify.slack_sdk")
TRANSIENT_ERRORS = {"ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"}
SINK = "slack"


def retry_handlers(retries: int, backoff: float = 0.5) -> list[RetryHandler]:
    """slack-sdk retry handlers: 429 (honours Retry-After), 5xx and connection errors with backoff."""
    calc = BackoffRetryIntervalCalculator(backoff_factor=backoff)
    return [
        RateLimitErrorRetryHandler(max_retry_count=retries),
        ServerErrorRetryHandler(max_retry_count=retries, interval_calculator=calc),
        ConnectionErrorRetryHandler(max_retry_count=retries, interval_calculator=calc),
    ]


def classify(exc: BaseException) -> Result:
    """Turn an exception from slack-sdk into a redacted Result."""
    if isinstance(exc, SlackApiError):
        status = getattr(exc.response, "status_code", 0) or 0
        code = exc.response.get("error", "") if hasattr(exc.response, "get") else ""
        transient = status >= 500 or status == 429 or code in TRANSIENT_ERRORS or not code
        return Result(False, transient, redact(f"Slack API error {status} {code}".strip()))
    # Connection refused/reset, timeouts (a hanging Slack), undecodable 5xx pages: all worth retrying.
    return Result(False, True, describe_error(exc))


class SlackSink:
    """Delivers outbox items carrying Events to Slack, threading updates under the incident's root message."""

    name = SINK

    def __init__(self, config: SlackConfig, links: Links, *, retry_backoff: float = 0.5) -> None:
        self.config = config
        self.links = links
        handlers = retry_handlers(config.retries, retry_backoff)
        self.web: WebClient | None = None
        self.hook: WebhookClient | None = None
        if config.token:
            self.web = WebClient(
                token=config.token.reveal(),
                base_url=config.base_url,
                timeout=int(max(1, config.timeout)),
                logger=sdk_log,
                retry_handlers=handlers,
            )
        elif config.webhook_url:
            self.hook = WebhookClient(
                config.webhook_url.reveal(),
                timeout=int(max(1, config.timeout)),
                logger=sdk_log,
                retry_handlers=handlers,
            )

    def wants(self, ev: Event) -> bool:
        """Webhooks cannot thread, so they get firing, repeat and resolved but not every update."""
        return self.web is not None or (self.hook is not None and ev.kind != "update")

    def deliver(self, item: Item, outbox: Outbox) -> Result:
        """Send one item; never raises."""
        try:
            ev = Event.from_dict(item.payload["event"])
            event_message(ev, self.links)  # rendered before any request: a failure here is the item's own
        except Exception as e:
            return Result(
                False, False, f"cannot render the notification: {type(e).__name__}: {e}", poison=True
            )
        try:
            if self.web is not None:
                return self._bot(ev, outbox)
            if self.hook is not None:
                return self._webhook(ev)
            return Result(False, False, "slack not configured")
        except Exception as e:
            return classify(e)

    def _webhook(self, ev: Event) -> Result:
        assert self.hook is not None
        text, blocks = event_message(ev, self.links)
        resp = self.hook.send(text=text, blocks=blocks)
        if resp.status_code == 200:
            return Result(True)
        transient = resp.status_code >= 500 or resp.status_code == 429
        return Result(False, transient, redact(f"webhook HTTP {resp.status_code} {resp.body[:200]}"))

    def _bot(self, ev: Event, outbox: Outbox) -> Result:
        assert self.web is not None
        root = outbox.thread(ev.incident, SINK)
        if root is None and ev.kind != "firing":
            # The root was never posted (rejected for good, or state lost): start a fresh root.
            ev = replace(ev, kind="firing" if ev.kind != "resolved" else ev.kind)
        if root is None:
            text, blocks = event_message(ev, self.links)
            resp = self.web.chat_postMessage(
                channel=ev.channel or self.config.channel, text=text, blocks=blocks, unfurl_links=False
            )
            outbox.set_thread(ev.incident, SINK, str(resp["channel"]), str(resp["ts"]))
            return Result(True)
        if ev.kind == "firing":
            return Result(True)  # posted before a crash, not yet marked done: do not post it twice
        channel, ts = root
        if ev.kind == "resolved":
            text, blocks = event_message(ev, self.links)
            self.web.chat_update(channel=channel, ts=ts, text=text, blocks=blocks)
        text, blocks = event_message(ev, self.links, root=False)
        self.web.chat_postMessage(
            channel=channel,
            thread_ts=ts,
            text=text,
            blocks=blocks,
            reply_broadcast=ev.kind == "repeat",
            unfurl_links=False,
        )
        return Result(True)

    def send_test(self) -> tuple[bool, str]:
        """Send a test message; returns (ok, a one-line redacted result)."""
        text, blocks = probe_message(self.links)
        try:
            if self.web is not None:
                resp = self.web.chat_postMessage(channel=self.config.channel, text=text, blocks=blocks)
                return True, f"slack (bot): ok, posted to {resp['channel']} at ts {resp['ts']}"
            if self.hook is not None:
                r = self.hook.send(text=text, blocks=blocks)
                if r.status_code == 200:
                    return True, "slack (webhook): ok"
                return False, redact(f"slack (webhook): failed: HTTP {r.status_code} {r.body[:200]}")
        except Exception as e:
            return False, f"slack ({self.config.mode}): failed: {classify(e).error}"
        return False, "slack: not configured"

    def payload(self, ev: Event) -> JsonObject:
        """What goes into the outbox for this sink."""
        return {"event": ev.to_dict()}
