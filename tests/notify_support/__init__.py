"""Test helpers for the notification layer: a local stand-in for Slack and synthetic diagnoses."""
