"""``--tls-min-version`` and ``--tls-cipher-suites``: upstream's Go names → what grpc core enforces.

Upstream sets ``tls.Config.MinVersion`` and ``CipherSuites`` (Go ``crypto/tls`` names). grpc
python offers neither; its core (BoringSSL, measured with grpcio 1.85) serves TLS 1.2 and 1.3
only, and takes TLS 1.2 cipher suites from the ``GRPC_SSL_CIPHER_SUITES`` environment variable
(OpenSSL names), read once when ``grpc`` is imported. So:

- minimum version: unset or ``VersionTLS12`` is what grpc enforces anyway (a TLS 1.1 client is
  refused, as Go's server default since Go 1.22); ``VersionTLS13`` cannot be enforced (no API, and
  a cipher list of TLS 1.3 suites alone makes BoringSSL refuse to start the server) and neither
  can ``VersionTLS10``/``VersionTLS11`` (grpc never speaks them): both are rejected.
- cipher suites: each Go name maps to its OpenSSL name; names BoringSSL no longer has (RC4, 3DES,
  ``TLS_RSA_WITH_AES_128_CBC_SHA256``) are rejected. TLS 1.3 suites are always on in BoringSSL
  as in Go, so naming them changes nothing (they are accepted, as upstream accepts them); a list
  of TLS 1.3 suites alone (which in Go leaves TLS 1.2 with no suite) is rejected.

:func:`apply_cipher_suites` sets the variable, and fails loudly if ``grpc`` was imported before
it could (``epp serve`` applies it before importing anything that loads grpc). It affects every
gRPC TLS connection of the process, which for the picker is the ext_proc server (and an OTLP
exporter speaking TLS 1.2, if any). This module imports nothing, so flag parsing stays light.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

__all__ = [
    "CIPHER_SUITES_ENV",
    "TlsPolicyError",
    "apply_cipher_suites",
    "check_min_version",
    "openssl_cipher_list",
]

CIPHER_SUITES_ENV = "GRPC_SSL_CIPHER_SUITES"

# Go's tls.CipherSuites() and tls.InsecureCipherSuites() for TLS 1.2 that BoringSSL in grpcio
# negotiates: each one checked by a TLS 1.2 handshake restricted to it (ECDSA ones with an ECDSA key).
_TLS12_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256": "ECDHE-ECDSA-AES128-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256": "ECDHE-RSA-AES128-SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
}
_TLS13_SUITES = frozenset({"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"})
# Go names upstream accepts that BoringSSL refuses to configure (or cannot negotiate).
_REMOVED_SUITES = frozenset(
    {
        "TLS_RSA_WITH_RC4_128_SHA",
        "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
        "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
        "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
        "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
        "TLS_RSA_WITH_AES_128_CBC_SHA256",
    }
)
_VERSIONS = ("VersionTLS10", "VersionTLS11", "VersionTLS12", "VersionTLS13")


class TlsPolicyError(ValueError):
    """A version or cipher suite that grpc python cannot enforce; the message names the flag."""


def check_min_version(name: str) -> None:
    """Accept ``""`` and ``VersionTLS12`` (grpc's own floor); reject what cannot be enforced."""
    if name in ("", "VersionTLS12"):
        return
    if name not in _VERSIONS:
        raise TlsPolicyError(f"--tls-min-version: unknown TLS version {name!r}; use VersionTLS12")
    if name == "VersionTLS13":
        raise TlsPolicyError(
            "--tls-min-version=VersionTLS13 cannot be enforced: grpc python has no minimum-version setting "
            "and always also serves TLS 1.2"
        )
    raise TlsPolicyError(f"--tls-min-version={name} cannot be honoured: grpc serves only TLS 1.2 and 1.3")


def openssl_cipher_list(go_names: Sequence[str]) -> str:
    """The ``GRPC_SSL_CIPHER_SUITES`` value for upstream's Go names (``""`` for none)."""
    if not go_names:
        return ""
    names: list[str] = []
    for go_name in go_names:
        if go_name in _TLS13_SUITES:
            continue
        if go_name in _REMOVED_SUITES:
            raise TlsPolicyError(
                f"--tls-cipher-suites: {go_name} is not available in grpc's TLS library (BoringSSL); "
                f"choose from {', '.join(_TLS12_SUITES)}"
            )
        openssl = _TLS12_SUITES.get(go_name)
        if openssl is None:
            raise TlsPolicyError(f"--tls-cipher-suites: unknown cipher suite {go_name!r} (use Go crypto/tls names)")
        if openssl not in names:
            names.append(openssl)
    if not names:
        raise TlsPolicyError(
            "--tls-cipher-suites: only TLS 1.3 suites given, which would leave TLS 1.2 without a suite "
            "(TLS 1.3 only); grpc python cannot serve TLS 1.3 alone"
        )
    return ":".join(names)


def apply_cipher_suites(cipher_list: str) -> None:
    """Export ``cipher_list`` for grpc core; it must happen before ``grpc`` is first imported.

    A no-op for ``""`` (grpc's own default list) and when the variable already holds the value.
    """
    if not cipher_list or os.environ.get(CIPHER_SUITES_ENV) == cipher_list:
        return
    if "grpc" in sys.modules:
        raise TlsPolicyError(
            f"--tls-cipher-suites cannot be applied: grpc was already imported in this process, and it "
            f"reads {CIPHER_SUITES_ENV} only then"
        )
    os.environ[CIPHER_SUITES_ENV] = cipher_list
