"""A throwaway CA, a server certificate for 127.0.0.1 and a client certificate, for TLS tests on loopback.

The picker's metrics TLS (``--metrics-cert-dir``, ``--metrics-client-ca-file``) and the epp.v1 API
behind it are tested with real handshakes; they need a CA that signs both sides, written as the
files a Secret mount gives the picker (``tls.crt``, ``tls.key``). EC P-256 keys, valid one hour.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["Pki", "make_pki"]


@dataclass(frozen=True)
class Pki:
    """The files: ``ca`` (PEM), ``server_dir`` (``tls.crt`` and ``tls.key``), the client's pair."""

    ca: Path
    server_dir: Path
    client_cert: Path
    client_key: Path

    def client(self, *, with_cert: bool = True) -> ssl.SSLContext:
        """A client context trusting the CA, presenting the client certificate unless told not to."""
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_cert:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def _issue(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None,
    *,
    server: bool = False,
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer or (name, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if server:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        builder = builder.add_extension(san, critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    path.mkdir(parents=True, exist_ok=True)
    (path / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (path / "tls.key").write_bytes(pem)
    return path / "tls.crt", path / "tls.key"


def make_pki(root: Path, *, server: str = "metrics", client: str = "prometheus") -> Pki:
    """A CA in ``root/ca``, the server's pair in ``root/server``, the client's in ``root/client``."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue(f"{server}-ca", ca_key, None)
    ca_file, _ = _write(root / "ca", ca, ca_key)
    server_key, client_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    _write(root / "server", _issue(server, server_key, (ca.subject, ca_key), server=True), server_key)
    client_cert, client_key_file = _write(root / "client", _issue(client, client_key, (ca.subject, ca_key)), client_key)
    return Pki(ca_file, root / "server", client_cert, client_key_file)
