"""Notifications: lifecycle of findings, Slack (Block Kit) and Alertmanager sinks, durable outbox."""

from doctor.notify.config import NotifyConfig, parse_notify_config
from doctor.notify.lifecycle import Event, Lifecycle
from doctor.notify.notifier import Notifier
from doctor.notify.redact import redact

__all__ = ["Event", "Lifecycle", "Notifier", "NotifyConfig", "parse_notify_config", "redact"]
