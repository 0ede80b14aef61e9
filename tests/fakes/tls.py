"""A test certificate authority for serving the fake model APIs over TLS (the relay checks the
endpoint's certificate against the CA a plan names, `ca_file`)."""
from __future__ import annotations

import ssl
from pathlib import Path


def make_test_ca(directory: Path) -> tuple[ssl.SSLContext, Path]:
    """(a server context for `localhost` signed by a fresh CA, that CA's PEM file)."""
    import trustme
    ca = trustme.CA()
    cert = ca.issue_cert("localhost", "127.0.0.1")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    pem = Path(directory) / "test-ca.pem"
    ca.cert_pem.write_to_path(str(pem))
    return context, pem
