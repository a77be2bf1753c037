"""The model client's TLS context: made once per process, verifying as the SDK would."""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.engine.llm import model_http_client, tls_context

BUNDLES = (Path("/etc/ssl/certs/ca-certificates.crt"), Path("/etc/ssl/cert.pem"))
PEM = re.compile(r"-----BEGIN CERTIFICATE-----.*?-----END CERTIFICATE-----\n", re.DOTALL)


@pytest.fixture
def fresh_tls_context() -> Iterator[None]:
    tls_context.cache_clear()
    yield
    tls_context.cache_clear()  # the next test's clients load the environment's again


def test_the_context_verifies_certificates_and_host_names(fresh_tls_context: None) -> None:
    context = tls_context()
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname


def test_clients_share_one_context(fresh_tls_context: None) -> None:
    first, second = model_http_client(), model_http_client()
    assert first is not second
    # What each client's connections are made with (httpx's transport, its pool).
    assert first._transport._pool._ssl_context is tls_context()  # type: ignore[attr-defined]
    assert second._transport._pool._ssl_context is tls_context()  # type: ignore[attr-defined]


def test_ssl_cert_file_names_the_certificates_trusted(
    fresh_tls_context: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An operator's own CA (a proxy's, a private provider's) is trusted, and only it."""
    bundle = next((b for b in BUNDLES if b.is_file()), None)
    if bundle is None:
        pytest.skip("no system CA bundle to take a certificate from")
    one = PEM.search(bundle.read_text())
    assert one is not None
    own = tmp_path / "own-ca.pem"
    own.write_text(one.group(0))
    monkeypatch.setenv("SSL_CERT_FILE", str(own))
    context = tls_context()
    assert len(context.get_ca_certs()) == 1
    assert context.verify_mode == ssl.CERT_REQUIRED
