"""--tls-min-version and --tls-cipher-suites: Go names mapped, what grpc cannot enforce refused by flag."""

from __future__ import annotations

import os

import pytest

from epp.cli import build_parser
from epp.config.options import OptionsError, TlsOptions
from epp.config.tls_policy import (
    CIPHER_SUITES_ENV,
    TlsPolicyError,
    apply_cipher_suites,
    check_min_version,
    openssl_cipher_list,
)
from epp.serve_command import options_from_args


@pytest.mark.parametrize("version", ["", "VersionTLS12"])
def test_tls_1_2_minimum_is_what_grpc_enforces(version: str) -> None:
    check_min_version(version)


@pytest.mark.parametrize(
    ("version", "why"),
    [
        ("VersionTLS13", "VersionTLS13 cannot be enforced"),
        ("VersionTLS11", "VersionTLS11 cannot be honoured: grpc serves only TLS 1.2 and 1.3"),
        ("VersionTLS10", "VersionTLS10 cannot be honoured"),
        ("TLS1.2", "unknown TLS version 'TLS1.2'"),
    ],
)
def test_other_minimum_versions_are_refused(version: str, why: str) -> None:
    with pytest.raises(TlsPolicyError, match=f"--tls-min-version.*{why}"):
        check_min_version(version)


def test_go_names_map_to_openssl_names_in_order() -> None:
    go = [
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        "TLS_RSA_WITH_AES_128_CBC_SHA",
        "TLS_AES_128_GCM_SHA256",  # TLS 1.3: always on, nothing to configure
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ]
    assert openssl_cipher_list(go) == "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:AES128-SHA"
    assert openssl_cipher_list([]) == ""


@pytest.mark.parametrize(
    ("names", "why"),
    [
        (["TLS_RSA_WITH_RC4_128_SHA"], "TLS_RSA_WITH_RC4_128_SHA is not available in grpc's TLS library"),
        (["TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA"], "not available"),
        (["ECDHE-RSA-AES128-GCM-SHA256"], "unknown cipher suite 'ECDHE-RSA-AES128-GCM-SHA256' .use Go crypto/tls"),
        (["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384"], "only TLS 1.3 suites"),
    ],
)
def test_suites_grpc_cannot_serve_are_refused(names: list[str], why: str) -> None:
    with pytest.raises(TlsPolicyError, match=f"--tls-cipher-suites: .*{why}"):
        openssl_cipher_list(names)


def test_flags_are_checked_when_options_are_built() -> None:
    def serve(*flags: str) -> TlsOptions:
        args = build_parser("serve").parse_args(["serve", "--pool-name", "p", *flags])
        return options_from_args(args).tls

    assert serve("--tls-cipher-suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256").grpc_cipher_list == (
        "ECDHE-RSA-AES128-GCM-SHA256"
    )
    with pytest.raises(OptionsError, match="--tls-min-version=VersionTLS13 cannot be enforced"):
        serve("--tls-min-version", "VersionTLS13")
    with pytest.raises(OptionsError, match="--tls-cipher-suites: unknown cipher suite 'nope'"):
        serve("--tls-cipher-suites", "nope")


def test_the_cipher_list_cannot_be_applied_once_grpc_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    import grpc  # noqa: F401 (loaded, as in every test process: too late for grpc core to see the list)

    monkeypatch.delenv(CIPHER_SUITES_ENV, raising=False)
    apply_cipher_suites("")  # grpc's default list: nothing to do
    with pytest.raises(TlsPolicyError, match="grpc was already imported"):
        apply_cipher_suites("AES128-SHA")
    assert CIPHER_SUITES_ENV not in os.environ
    monkeypatch.setenv(CIPHER_SUITES_ENV, "AES128-SHA")
    apply_cipher_suites("AES128-SHA")  # already in effect (set before grpc loaded): fine
