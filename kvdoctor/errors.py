"""The one hierarchy of errors kvdoctor raises on purpose (as httpx does): catch a branch, or all of them.

KvdoctorError
├── InputError          bad input: a file, flag, expression, exposition or recording kvdoctor cannot use
│   └── ValidationError every problem found in one input at once, one per line, each `file:line: …` first
├── TransportError      a remote end (a vLLM target, Prometheus, a live capacity source) did not answer as needed
└── (internal)          signals caught where they are raised, never shown to a user: INTERNAL lists them

`kvdoctor` (cli.main) exits EXIT_INPUT for an InputError and EXIT_TRANSPORT for a TransportError, printing the
message without a traceback; README's "Exit codes" table is the same list.
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


EXIT_OK = 0
EXIT_FOUND = (
    1  # the command worked and found what it reports as a failure (a limit hit, an undelivered message)
)
EXIT_INPUT = 2  # usage or input error (InputError)
EXIT_TRANSPORT = 3  # a remote end did not answer (TransportError)
EXIT_INTERRUPTED = 130  # Ctrl-C, as shells count it (128 + SIGINT)

# Errors on neither branch, by qualified name: each is caught next to where it is raised and turned into an
# HTTP status, a scrape's `limit` or an alert's evaluation error, so none reaches the command line.
INTERNAL = {
    "kvdoctor.web.request.Refused": "a malformed or oversized HTTP request, answered with its 4xx status",
    "kvdoctor.ingest.parse.LimitExceeded": "a scrape over sample_limit & co., recorded as the target's `limit`",
    "kvdoctor.notify.outboxdb.Corrupt": "a notify.sqlite that is no usable outbox: moved aside where it is opened",
    "kvdoctor.whatif.sharing.Simulate": "a what-if look that found no fresh effect: the advisor queues a simulation",
    "kvdoctor.whatif.offload.OffloadClosed": "a simulation asked for at exit: the what-if workers take it as gone",
    "kvdoctor.whatif.offload.OffloadTimeout": "a simulation past its deadline, stopped: its target's what-if failure",
}
