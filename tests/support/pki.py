"""A test CA with server and client certificates (a module-scoped fixture), for TLS and mTLS tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module", name="pki")
def pki_fixture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A test CA, a server certificate for 127.0.0.1 and a client certificate, made with the openssl CLI."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    d = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    openssl(
        "req",
        "-x509",
        *ec,
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=kvdoctor test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )
    for name, san in (("server", "IP:127.0.0.1,DNS:localhost"), ("client", "DNS:prometheus.example")):
        openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        (d / f"{name}.ext").write_text(f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n")
        openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            f"{name}.pem",
            "-days",
            "2",
            "-extfile",
            f"{name}.ext",
            cwd=d,
        )
    return d
