"""TLS for tests of HTTPS scraping: a model server's self-signed certificate naming the pod's IP
(its own CA, as a ``caCertPath`` bundle), and a scraper's client certificate for mTLS."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

__all__ = ["client_cert", "server_tls"]


def _self_signed(directory: Path, stem: str, common_name: str, ip: str | None) -> tuple[Path, Path]:
    """A self-signed CA certificate (naming ``ip`` if given) and its key, as PEM files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
    )
    if ip is not None:
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(ip))])
        builder = builder.add_extension(san, critical=False)
    cert = builder.sign(key, hashes.SHA256())
    cert_file, key_file = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_file, key_file


def server_tls(directory: Path, ip: str, *, client_ca: Path | None = None) -> tuple[ssl.SSLContext, Path]:
    """A server context whose certificate names ``ip`` (as a pod's names its IP), and that PEM's path.

    ``client_ca``: clients must present a certificate it signed (mTLS).
    """
    cert_file, key_file = _self_signed(directory, "tls", "model-server", ip)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    if client_ca is not None:
        context.load_verify_locations(client_ca)
        context.verify_mode = ssl.CERT_REQUIRED
    return context, cert_file


def client_cert(directory: Path) -> tuple[Path, Path]:
    """A scraper's client certificate and key (self-signed: it is its own ``client_ca``)."""
    return _self_signed(directory, "client", "epp-scraper", None)
