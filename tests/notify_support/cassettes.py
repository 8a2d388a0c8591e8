"""Slack cassettes: whether to record, the recorder, and a scan for secrets left in them."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import vcr

from kvdoctor.notify.redact import redact

# Record with KVDOCTOR_RECORD_CASSETTES=1 (against the fake Slack, never the internet); CI only replays.
RECORD = os.environ.get("KVDOCTOR_RECORD_CASSETTES") == "1"


def scrub_request(request: Any) -> Any:
    """Mask webhook paths in the URI and secrets in the body before anything is written."""
    request.uri = redact(request.uri)
    if request.body:
        body = request.body.decode() if isinstance(request.body, bytes) else request.body
        request.body = redact(body).encode()
    return request


def scrub_response(response: dict[str, Any]) -> dict[str, Any]:
    """Mask secrets a server might echo back."""
    body = response.get("body", {}).get("string")
    if isinstance(body, bytes):
        response["body"]["string"] = redact(body.decode()).encode()
    return response


recorder = vcr.VCR(
    record_mode="once" if RECORD else "none",
    match_on=["method", "scheme", "host", "path", "query"],  # not the port: the fake's port is random
    filter_headers=[("authorization", "Bearer REDACTED")],
    filter_post_data_parameters=["token"],
    before_record_request=scrub_request,
    before_record_response=scrub_response,
    decode_compressed_response=True,
)
SECRET_PATTERNS = [
    re.compile(r"xox[abprs]-"),
    re.compile(r"hooks\.slack\.com/services/T"),
    re.compile(r"/services/T(?!000/B000/REDACTED)[A-Z0-9]{6,}/B[A-Z0-9]{6,}/"),
    re.compile(r"(?i)authorization:\s*\n?\s*-\s*bearer\s+(?!REDACTED)"),
]


def find_secrets(root: Path) -> list[str]:
    """Every file:line under root that looks like it holds a Slack token or webhook path."""
    hits = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        hits += [f"{path.relative_to(root)}: {p.pattern}" for p in SECRET_PATTERNS if p.search(text)]
    return hits
