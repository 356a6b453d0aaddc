"""TLS material for the ext_proc port: a mounted certificate, or a self-signed one made in memory.

As upstream (``--secure-serving`` defaults to true): with ``--cert-path`` the server loads
``<path>/tls.crt`` and ``<path>/tls.key`` (and, as Go's ``tls.LoadX509KeyPair``, refuses a key
that does not belong to the certificate); without it, it generates a self-signed certificate as
upstream's ``CreateSelfSignedTLSCertificate`` does: RSA 4096 (PKCS#8), ``O=Inference Ext``, a
random 128-bit serial, valid 10 years, ServerAuth, not a CA. Generating the 4096-bit key costs
start-up time, measured on the 2-vCPU reference machine: median 0.35 s, 0.08 to 1.07 s over 8
runs (2048 bits: 0.06 s), off the event loop and before the pool has synced anyway, so we keep
upstream's size. One addition: SANs ``localhost``, ``127.0.0.1`` and ``::1`` (upstream has none),
so a local client can verify exactly this certificate (the PEM is kept on :class:`TlsConfig`).
Gateways do not verify it (the charts' ``UpstreamTlsContext`` has an empty validation context).
Reading and generating here is synchronous: call it via ``asyncio.to_thread`` from a running loop.
Reloading on change is :mod:`epp.extproc.cert_reload`; versions and ciphers are
:mod:`epp.config.tls_policy`.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import secrets
from dataclasses import dataclass
from typing import Protocol

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ServerTls", "TlsConfig", "TlsError"]

_ORGANIZATION = "Inference Ext"
_VALIDITY = datetime.timedelta(days=365 * 10)
_KEY_SIZE = 4096
_SERIAL_BITS = 128


class TlsError(Exception):
    """The certificate or key could not be read or does not parse."""


class ServerTls(Protocol):
    """What the ext_proc server binds with: a fixed pair, or a reloader (``CertReloader``)."""

    def credentials(self) -> grpc.ServerCredentials: ...


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
            cert = x509.load_pem_x509_certificate(cert_pem)
        except ValueError as e:
            raise TlsError(f"{cert_file}: not a PEM certificate: {e}") from e
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError) as e:
            raise TlsError(f"{key_file}: not an unencrypted PEM private key: {e}") from e
        if _public_der(key.public_key()) != _public_der(cert.public_key()):
            raise TlsError(f"{key_file}: private key does not match the public key in {cert_file}")
        return cls(cert_pem=cert_pem, key_pem=key_pem)

    @classmethod
    def self_signed(cls, *, key_size: int = _KEY_SIZE) -> TlsConfig:
        """A fresh self-signed RSA certificate (also valid for localhost, 127.0.0.1 and ::1).

        ``key_size`` is upstream's 4096 bits; tools and tests that make many pairs may ask for less.
        """
        key = rsa.generate_private_key(public_exponent=65537, key_size=key_size)
        name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, _ORGANIZATION)])
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(secrets.randbits(_SERIAL_BITS) or 1)
            .not_valid_before(now)
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_encipherment=True,
                    key_cert_sign=False,
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

    def certificate_configuration(self) -> grpc.ServerCertificateConfiguration:
        """This pair as grpc's unit of a certificate swap (see :mod:`epp.extproc.cert_reload`)."""
        return grpc.ssl_server_certificate_configuration([(self.key_pem, self.cert_pem)])


def _public_der(key: PublicKeyTypes) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
