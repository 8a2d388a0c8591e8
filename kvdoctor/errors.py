"""The one hierarchy of errors kvdoctor raises on purpose (as httpx does): catch a branch, or all of them.

KvdoctorError
├── InputError          bad input: a file, flag, expression, exposition or recording kvdoctor cannot use
│   └── ValidationError every problem found in one input at once, one per line, each `file:line: …` first
└── TransportError      a remote end (a vLLM target, Prometheus, a live capacity source) did not answer as needed
"""

from __future__ import annotations


class KvdoctorError(Exception):
    """Base of every error kvdoctor raises on purpose."""


class InputError(KvdoctorError, ValueError):
    """Input kvdoctor cannot use; the message names the file, line, flag or target."""


class ValidationError(InputError):
    """Every problem found validating one input, one per line."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = list(errors)


class TransportError(KvdoctorError):
    """A remote end did not answer, or answered something unusable."""
