"""Notifications: lifecycle of findings, Slack (Block Kit) and Alertmanager sinks, durable outbox."""

from kvdoctor.notify.alerts import Event
from kvdoctor.notify.config import NotifyConfig, parse_notify_config
from kvdoctor.notify.lifecycle import Lifecycle
from kvdoctor.notify.notifier import Notifier
from kvdoctor.notify.redact import redact

__all__ = ["Event", "Lifecycle", "Notifier", "NotifyConfig", "parse_notify_config", "redact"]
