"""The generated bootstraps: the real ``envoy --mode validate`` accepts every variant; the options land
where Envoy reads them; impossible combinations are refused with a clear message."""

from __future__ import annotations

from typing import Any

import pytest

from epp.framework.headers import DESTINATION_ENDPOINT, DESTINATION_ENDPOINT_SERVED
from epp_sim.stack.envoy import validate_bootstrap
from epp_sim.stack.envoy_config import (
    EXT_PROC_SERVICE,
    GRACEFUL_CLOSE_GUARD,
    EnvoyConfigError,
    ExtProcTarget,
    envoy_bootstrap,
    envoy_bootstrap_plain,
)

TARGET = ExtProcTarget("127.0.0.1", 9002)
REPLICAS = [TARGET, ExtProcTarget("127.0.0.1", 9012), ExtProcTarget("127.0.0.2", 9002)]


def _cluster(bootstrap: dict[str, Any], name: str) -> dict[str, Any]:
    clusters: list[dict[str, Any]] = bootstrap["static_resources"]["clusters"]
    return next(c for c in clusters if c["name"] == name)


def _hcm(bootstrap: dict[str, Any]) -> dict[str, Any]:
    listener = bootstrap["static_resources"]["listeners"][0]
    typed: dict[str, Any] = listener["filter_chains"][0]["filters"][0]["typed_config"]
    return typed


def _ext_proc(bootstrap: dict[str, Any]) -> dict[str, Any]:
    filters = _hcm(bootstrap)["http_filters"]
    typed: dict[str, Any] = next(f for f in filters if f["name"] == "envoy.filters.http.ext_proc")["typed_config"]
    return typed


VARIANTS: dict[str, dict[str, Any]] = {
    "gie-default": envoy_bootstrap(listen_port=8081, ext_proc=TARGET, admin_port=19000),
    "buffered-header-failopen": envoy_bootstrap(
        listen_port=0,
        ext_proc=TARGET,
        admin_port=0,
        route_by="header",
        request_body_mode="BUFFERED",
        response_body_mode="BUFFERED",
        failure_mode_allow=True,
    ),
    "tls-dns-no-healthcheck": envoy_bootstrap(
        listen_port=0,
        ext_proc=ExtProcTarget("vllm-llama3-8b-instruct-epp.default.svc", 9002),
        admin_port=0,
        tls_to_processor=True,
        health_check_service=None,
    ),
    "response-body-none": envoy_bootstrap(
        listen_port=0, ext_proc=TARGET, admin_port=0, response_body_mode="NONE", message_timeout_s=0.25
    ),
    "ipv6": envoy_bootstrap(listen_port=0, ext_proc=ExtProcTarget("::1", 9002), admin_port=0, listen_host="::1"),
    "no-processor": envoy_bootstrap(listen_port=0, ext_proc=None, admin_port=0, route_by="header"),
    "stock-close": envoy_bootstrap(listen_port=0, ext_proc=TARGET, admin_port=0, graceful_ext_proc_close=False),
    "replicas": envoy_bootstrap(listen_port=0, ext_proc=REPLICAS, admin_port=0),
    "replicas-dns": envoy_bootstrap(
        listen_port=0, ext_proc=[TARGET, ExtProcTarget("epp-1.epp.default.svc", 9002)], admin_port=0
    ),
    "plain": envoy_bootstrap_plain(0, "127.0.0.1", 8000, 0),
    "plain-dns": envoy_bootstrap_plain(8081, "localhost", 8000, 19000),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
async def test_envoy_validates_every_variant(name: str) -> None:
    await validate_bootstrap(VARIANTS[name])


async def test_validate_reports_envoys_complaint() -> None:
    broken = envoy_bootstrap(listen_port=0, ext_proc=TARGET, admin_port=0)
    _cluster(broken, "original_destination")["lb_policy"] = "NOT_A_POLICY"
    with pytest.raises(EnvoyConfigError, match="NOT_A_POLICY"):
        await validate_bootstrap(broken)


def test_gie_processing_mode_and_metadata_namespace() -> None:
    ext_proc = _ext_proc(VARIANTS["gie-default"])
    assert ext_proc["processing_mode"] == {
        "request_header_mode": "SEND",
        "response_header_mode": "SEND",
        "request_body_mode": "FULL_DUPLEX_STREAMED",
        "response_body_mode": "FULL_DUPLEX_STREAMED",
        "request_trailer_mode": "SEND",
        "response_trailer_mode": "SEND",
    }
    assert ext_proc["metadata_options"] == {
        "receiving_namespaces": {"untyped": ["envoy.lb"]},
        "forwarding_namespaces": {"untyped": ["envoy.lb"]},
    }
    assert ext_proc["failure_mode_allow"] is False
    assert ext_proc["message_timeout"] == "1000s"
    assert ext_proc["grpc_service"]["timeout"] == "10s"
    assert _ext_proc(VARIANTS["response-body-none"])["message_timeout"] == "0.25s"


def _static_runtime(bootstrap: dict[str, Any]) -> dict[str, Any]:
    layers: list[dict[str, Any]] = bootstrap["layered_runtime"]["layers"]
    static: dict[str, Any] = next(layer for layer in layers if "static_layer" in layer)["static_layer"]
    return static


def test_ext_proc_streams_close_gracefully_unless_a_stock_envoy_is_asked_for() -> None:
    assert _static_runtime(VARIANTS["gie-default"]) == {GRACEFUL_CLOSE_GUARD: True}
    assert _static_runtime(VARIANTS["stock-close"]) == {}


def test_routing_is_original_dst_on_metadata_by_default_and_header_on_request() -> None:
    by_metadata = _cluster(VARIANTS["gie-default"], "original_destination")
    assert (by_metadata["type"], by_metadata["lb_policy"]) == ("ORIGINAL_DST", "CLUSTER_PROVIDED")
    assert by_metadata["original_dst_lb_config"] == {
        "metadata_key": {"key": "envoy.lb", "path": [{"key": DESTINATION_ENDPOINT}]}
    }
    by_header = _cluster(VARIANTS["buffered-header-failopen"], "original_destination")
    assert by_header["original_dst_lb_config"] == {"use_http_header": True, "http_header_name": DESTINATION_ENDPOINT}
    route = _hcm(VARIANTS["gie-default"])["route_config"]["virtual_hosts"][0]["routes"][0]["route"]
    assert route == {"cluster": "original_destination", "timeout": "0s"}


def test_the_served_endpoint_reaches_the_picker_as_envoy_lb_metadata() -> None:
    hcm = _hcm(VARIANTS["gie-default"])
    names = [f["name"] for f in hcm["http_filters"]]
    # On the response path filters run bottom up: the metadata is set before ext_proc sees the headers.
    assert names == [
        "envoy.filters.http.ext_proc",
        "envoy.filters.http.header_to_metadata",
        "envoy.filters.http.router",
    ]
    (rule,) = hcm["http_filters"][1]["typed_config"]["response_rules"]
    assert rule["header"] == DESTINATION_ENDPOINT_SERVED and rule["remove"] is True
    assert rule["on_header_present"] == {
        "metadata_namespace": "envoy.lb",
        "key": DESTINATION_ENDPOINT_SERVED,
        "type": "STRING",
    }
    (added,) = hcm["route_config"]["virtual_hosts"][0]["routes"][0]["response_headers_to_add"]
    assert added["header"] == {"key": DESTINATION_ENDPOINT_SERVED, "value": "%UPSTREAM_HOST%"}


def test_ext_proc_cluster_is_http2_health_checked_and_optionally_tls() -> None:
    plain = _cluster(VARIANTS["gie-default"], "ext_proc")
    assert plain["type"] == "STATIC"
    options = plain["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in options["explicit_http_config"]
    (check,) = plain["health_checks"]
    assert check["grpc_health_check"] == {"service_name": EXT_PROC_SERVICE}
    assert check["no_traffic_interval"] == "2s"
    assert "transport_socket" not in plain

    tls = _cluster(VARIANTS["tls-dns-no-healthcheck"], "ext_proc")
    assert tls["type"] == "STRICT_DNS"
    assert "health_checks" not in tls
    context = tls["transport_socket"]["typed_config"]["common_tls_context"]
    assert context == {"alpn_protocols": ["h2"], "validation_context": {}}


def test_several_processors_are_one_round_robin_cluster_each_endpoint_health_checked() -> None:
    single = _cluster(VARIANTS["gie-default"], "ext_proc")
    replicas = _cluster(VARIANTS["replicas"], "ext_proc")
    assert replicas["type"] == "STATIC" and replicas["lb_policy"] == "ROUND_ROBIN"
    (locality,) = replicas["load_assignment"]["endpoints"]
    addresses = [e["endpoint"]["address"]["socket_address"] for e in locality["lb_endpoints"]]
    assert addresses == [{"address": t.host, "port_value": t.port} for t in REPLICAS]
    assert replicas["health_checks"] == single["health_checks"]  # a cluster's checks probe each endpoint
    # One target alone or in a list: the same cluster.
    assert envoy_bootstrap(listen_port=0, ext_proc=[TARGET], admin_port=0) == envoy_bootstrap(
        listen_port=0, ext_proc=TARGET, admin_port=0
    )
    assert _cluster(VARIANTS["replicas-dns"], "ext_proc")["type"] == "STRICT_DNS"  # one name among them


def test_admin_and_listener_bind_loopback_on_the_requested_ports() -> None:
    bootstrap = VARIANTS["gie-default"]
    assert bootstrap["admin"]["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 19000}
    listener = bootstrap["static_resources"]["listeners"][0]
    assert listener["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 8081}


def test_without_a_processor_there_is_no_ext_proc_filter_or_cluster() -> None:
    for name in ("no-processor", "plain"):
        filters = [f["name"] for f in _hcm(VARIANTS[name])["http_filters"]]
        assert filters == ["envoy.filters.http.router"]
        assert all(c["name"] != "ext_proc" for c in VARIANTS[name]["static_resources"]["clusters"])
    backend = _cluster(VARIANTS["plain"], "backend")
    endpoint = backend["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]
    assert endpoint["address"]["socket_address"] == {"address": "127.0.0.1", "port_value": 8000}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"failure_mode_allow": True}, "no effect with FULL_DUPLEX_STREAMED"),
        ({"ext_proc": None}, "route_by='header'"),
        ({"ext_proc": []}, "lists no processor"),
        ({"ext_proc": [TARGET, ExtProcTarget("127.0.0.1", 9002)]}, "lists a processor twice"),
        ({"request_body_mode": "STREAMING"}, "request_body_mode must be one of"),
        ({"route_by": "path"}, "route_by must be"),
        ({"listen_port": 70000}, "listen_port must be an integer"),
        ({"admin_port": -1}, "admin_port must be an integer"),
        ({"message_timeout_s": -1.0}, "must not be negative"),
    ],
)
def test_bad_options_are_refused_by_name(kwargs: dict[str, Any], message: str) -> None:
    args: dict[str, Any] = {"listen_port": 0, "ext_proc": TARGET, "admin_port": 0} | kwargs
    with pytest.raises(EnvoyConfigError, match=message):
        envoy_bootstrap(**args)


def test_ext_proc_target_checks_its_fields() -> None:
    with pytest.raises(EnvoyConfigError, match="port"):
        ExtProcTarget("127.0.0.1", 0)
    with pytest.raises(EnvoyConfigError, match="host"):
        ExtProcTarget("", 9002)
