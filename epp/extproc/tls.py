"""TLS for the ext_proc port: a mounted certificate, or a self-signed one made in memory.

As upstream (``--secure-serving`` defaults to true): with ``--cert-path`` the server loads
``<path>/tls.crt`` and ``<path>/tls.key``; without it, it generates a self-signed certificate
(Organization "Inference Ext", valid 10 years). Envoy's upstream TLS context for the picker does
not validate the certificate, so self-signed is enough. We use RSA 2048 rather than upstream's
4096: generation takes ~50 ms instead of ~1 s at start-up, and 2048 is still the common floor.
The PEM is kept on :class:`TlsConfig` so tests and local tools can trust exactly this cert.
Reading files here is synchronous: it runs once at start-up (call it via ``asyncio.to_thread``
from a running loop if that matters).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["TlsConfig", "TlsError", "tls_credentials"]

_ORGANIZATION = "Inference Ext"
_VALIDITY = datetime.timedelta(days=365 * 10)
_KEY_SIZE = 2048


class TlsError(Exception):
    """The certificate or key could not be read or does not parse."""


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """A PEM certificate chain and its private key for the ext_proc server."""

    cert_pem: bytes
    key_pem: bytes

    @classmethod
    def from_cert_path(cls, cert_path: str | None) -> TlsConfig:
        """Load ``tls.crt``/``tls.key`` from ``cert_path``; generate a self-signed pair if it is empty."""
        return cls.load(cert_path) if cert_path else cls.self_signed()

    @classmethod
    def load(cls, cert_path: str) -> TlsConfig:
        """Read and check ``<cert_path>/tls.crt`` and ``<cert_path>/tls.key``."""
        cert_file = os.path.join(cert_path, "tls.crt")
        key_file = os.path.join(cert_path, "tls.key")
        try:
            with open(cert_file, "rb") as f:
                cert_pem = f.read()
            with open(key_file, "rb") as f:
                key_pem = f.read()
        except OSError as e:
            raise TlsError(f"--cert-path {cert_path!r}: cannot read {e.filename}: {e.strerror}") from e
        try:
            x509.load_pem_x509_certificate(cert_pem)
        except ValueError as e:
            raise TlsError(f"{cert_file}: not a PEM certificate: {e}") from e
        try:
            serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError) as e:
            raise TlsError(f"{key_file}: not an unencrypted PEM private key: {e}") from e
        return cls(cert_pem=cert_pem, key_pem=key_pem)

    @classmethod
    def self_signed(cls) -> TlsConfig:
        """A fresh self-signed RSA certificate (also valid for localhost, 127.0.0.1 and ::1)."""
        key = rsa.generate_private_key(public_exponent=65537, key_size=_KEY_SIZE)
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, _ORGANIZATION)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=True,
                    key_cert_sign=True,
                    content_commitment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    crl_sign=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.SubjectAlternativeName(
                    [
                        x509.DNSName("localhost"),
                        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                        x509.IPAddress(ipaddress.ip_address("::1")),
                    ]
                ),
                critical=False,
            )
            .sign(key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        return cls(cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=key_pem)

    def credentials(self) -> grpc.ServerCredentials:
        """gRPC server credentials for this pair (gRPC negotiates ALPN ``h2`` itself)."""
        return grpc.ssl_server_credentials([(self.key_pem, self.cert_pem)])


def tls_credentials(cert_path: str | None) -> grpc.ServerCredentials:
    """Server credentials from ``cert_path`` (``tls.crt``/``tls.key``), or self-signed when empty."""
    return TlsConfig.from_cert_path(cert_path).credentials()
