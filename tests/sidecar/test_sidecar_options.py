"""``epp sidecar``'s flags: upstream's names and defaults, the YAML configuration, and what is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from sidecar_parts import sidecar_options

from epp.cli import main
from epp.sidecar.options import SidecarOptionsError


def test_upstream_defaults() -> None:
    o = sidecar_options()
    assert (o.port, o.model_server_port, o.data_parallel_size, o.kv_connector) == (8000, 8200, 1, "nixlv2")
    assert o.secure_proxy and not o.ssrf_protection and o.pool_group == "inference.networking.k8s.io"
    assert (o.prefill_max_retries, o.prefill_retry_backoff, o.prefill_timeout) == (0, 0.2, 60.0)
    assert o.local_prefill_fallback and o.metrics_port == 0 and o.decoder_url == "http://localhost:8200"


def test_flags_win_over_the_configuration(tmp_path: Path) -> None:
    config = tmp_path / "sidecar.yaml"
    config.write_text("port: 9100\nmodel-server-port: 9300\nenable-tls: [decoder]\nprefill-retry-backoff: 1s\n")
    o = sidecar_options(f"--configuration-file={config}", "--port=9000")
    assert (o.port, o.model_server_port, o.prefill_retry_backoff) == (9000, 9300, 1.0)
    assert o.tls_stages == {"decoder"} and o.decoder_url == "https://localhost:9300"
    inline = sidecar_options("--configuration={vllm-port: 8400, secure-proxy: false}", "--vllm-port=8500")
    assert inline.model_server_port == 8500 and not inline.secure_proxy  # the deprecated flag still wins
    assert "--vllm-port is deprecated: use --model-server-port" in inline.no_effect
    assert sidecar_options("--configuration=vllm-port: 8400").model_server_port == 8400


def test_lists_booleans_and_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    o = sidecar_options(
        "--enable-tls=prefiller,decoder", "--enable-tls", "encoder", "--tls-insecure-skip-verify=prefiller"
    )
    assert o.tls_stages == {"prefiller", "decoder", "encoder"} and o.insecure_stages == {"prefiller"}
    monkeypatch.setenv("INFERENCE_POOL", "team/pool-a")
    monkeypatch.setenv("ENABLE_PREFILLER_SAMPLING", "true")
    o = sidecar_options("--enable-ssrf-protection")
    assert (o.pool_namespace, o.pool_name, o.ssrf_protection, o.prefiller_sampling) == ("team", "pool-a", True, True)
    assert sidecar_options("--inference-pool=pool-b").pool_namespace == "default"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--kv-connector=sglang"], "--kv-connector sglang: not built in epp sidecar"),
        (["--kv-connector=bogus"], "--kv-connector must be one of: nixlv2, shared-storage, sglang, mooncake"),
        (["--ec-connector=ec-nixl"], "encoder disaggregation is not built"),
        (["--enable-p2p-pull"], "--enable-p2p-pull: P2P cached-prefix pulls are not built"),
        (["--decode-chunk-size=512"], "chunked decode is not built"),
        (["--moriio-write-mode"], "--moriio-write-mode: MoRI-IO is not built"),
        (["--enable-tls=prefill"], "--enable-tls stages must be one of: prefiller, decoder, encoder"),
        (["--data-parallel-size=9"], "--data-parallel-size must be 1..8"),
        (["--port=65535", "--data-parallel-size=2"], r"--port: port range \[65535, 65536\]"),
        (["--enable-ssrf-protection"], "--inference-pool flag or INFERENCE_POOL environment variable is required"),
        (["--inference-pool=a/b/c"], "not multiple slashes"),
        (["--pool-group=example.com"], "unsupported --pool-group"),
        (["--prefill-max-retries=1", "--prefill-retry-backoff=0s"], "--prefill-retry-backoff must be positive"),
        (["--configuration=bogus: 1"], r"unknown field\(s\) \['bogus'\]"),
        (["--configuration=a: 1", "--configuration-file=x"], "mutually exclusive"),
        (["--prefill-timeout=soon"], "--prefill-timeout: invalid duration"),
    ],
)
def test_refusals_name_the_flag(argv: list[str], message: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERENCE_POOL", raising=False)
    with pytest.raises(SidecarOptionsError, match=message):
        sidecar_options(*argv)


def test_the_command_exits_2_on_a_bad_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sidecar", "--kv-connector=mooncake"]) == 2
    assert "epp sidecar: --kv-connector mooncake: not built" in capsys.readouterr().err
