"""HTTPS through a pinned address: the name still drives SNI and certificate checks."""

from __future__ import annotations

import datetime
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from callgate.executors import HttpExecutor
from callgate.testing import tool_call as make_call

NAME = "secure.test"


def _certificate(
    subject: str, issuer_key: ec.EllipticCurvePrivateKey | None, issuer: x509.Name | None,
    *, ca: bool,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer or name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if not ca:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(subject)]), critical=False
        )
    return builder.sign(issuer_key or key, hashes.SHA256()), key


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep connections open, so reuse would be possible

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""

    def do_GET(self) -> None:
        if self.path == "/downgrade":
            self.send_response(302)
            self.send_header("Location", f"http://{NAME}:{self.server.server_address[1]}/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = f"sni ok, host {self.headers['Host']}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, ssl.SSLContext]]:
    ca_cert, ca_key = _certificate("callgate test CA", None, None, ca=True)
    leaf, leaf_key = _certificate(NAME, ca_key, ca_cert.subject, ca=False)
    folder: Path = tmp_path_factory.mktemp("tls")
    (folder / "leaf.pem").write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(leaf_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ))
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(folder / "leaf.pem", folder / "key.pem")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.socket = server_context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    client_context = ssl.create_default_context(
        cadata=ca_cert.public_bytes(serialization.Encoding.PEM).decode()
    )
    yield server.server_address[1], client_context
    server.shutdown()
    server.server_close()
    thread.join(5)


def _executor(context: ssl.SSLContext) -> HttpExecutor:
    return HttpExecutor(
        allowed_addresses=frozenset({"127.0.0.1"}),
        resolver=lambda host, port: ["127.0.0.1"] if host == NAME else [],
        ssl_context=context,
    )


def test_https_to_a_pinned_address_verifies_the_certificate_for_the_name(
    tls_server: tuple[int, ssl.SSLContext],
) -> None:
    port, context = tls_server
    result = _executor(context).execute(make_call("http", "get", url=f"https://{NAME}:{port}/"))
    assert result.status == "ok", result.error
    assert result.output["body"] == f"sni ok, host {NAME}:{port}"


def test_a_certificate_for_another_name_fails_verification(
    tls_server: tuple[int, ssl.SSLContext],
) -> None:
    port, context = tls_server
    result = _executor(context).execute(make_call("http", "get", url=f"https://127.0.0.1:{port}/"))
    assert result.status == "error"
    assert str(result.error).startswith("http.transport")


def test_a_redirect_from_https_to_http_is_denied(tls_server: tuple[int, ssl.SSLContext]) -> None:
    port, context = tls_server
    url = f"https://{NAME}:{port}/downgrade"
    result = _executor(context).execute(make_call("http", "get", url=url))
    assert result.status == "denied"
    assert str(result.error).startswith("ssrf.redirect-downgrade")


def test_a_verified_connection_is_never_reused_for_another_name_at_the_same_address(
    tls_server: tuple[int, ssl.SSLContext],
) -> None:
    port, context = tls_server
    executor = HttpExecutor(
        allowed_addresses=frozenset({"127.0.0.1"}),
        resolver=lambda host, port: ["127.0.0.1"],
        ssl_context=context,
    )
    first = executor.execute(make_call("http", "get", url=f"https://{NAME}:{port}/"))
    assert first.status == "ok", first.error
    other = executor.execute(make_call("http", "get", url=f"https://other.test:{port}/"))
    assert other.status == "error"
    assert str(other.error).startswith("http.transport")
