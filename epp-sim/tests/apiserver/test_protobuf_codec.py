"""The Kubernetes protobuf reader: the envelope, each wire mechanism the table uses, and every way a body can be bad.

Bodies are built with a few lines of protobuf encoding here (a test-side encoder, field by
field), plus one body captured byte for byte from ``kubectl create namespace obs -v=8``. That
kubectl's own bodies decode to what kubectl means is checked end to end in
``test_kubectl_imperative.py``.
"""

from __future__ import annotations

import base64
import struct

import pytest

from epp_sim.apiserver import ApiError, Store
from epp_sim.apiserver.protobuf import decode
from epp_sim.apiserver.protobuf.codec import table
from epp_sim.apiserver.protobuf.messages import Part, build

KUBECTL_CREATE_NAMESPACE = bytes.fromhex(
    "6b3873000a0f0a0276311209 4e616d657370616365121b0a130a036f6273120"
    "01a0022002a00320038004200 12001a020a001a002200".replace(" ", "")
)
"""``kubectl create namespace obs``'s request body, from ``kubectl -v=8`` (kubectl 1.37.1)."""


def varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def f_int(number: int, value: int) -> bytes:
    return varint(number << 3) + varint(value)


def f_bytes(number: int, value: bytes | str) -> bytes:
    data = value.encode() if isinstance(value, str) else value
    return varint(number << 3 | 2) + varint(len(data)) + data


def f_double(number: int, value: float) -> bytes:
    return varint(number << 3 | 1) + struct.pack("<d", value)


def entry(key: str, value: bytes) -> bytes:
    """A map entry whose value (field 2) is already encoded."""
    return f_bytes(1, key) + value


def envelope(api_version: str, kind: str, raw: bytes, *, extra: bytes = b"") -> bytes:
    return b"k8s\x00" + f_bytes(1, f_bytes(1, api_version) + f_bytes(2, kind)) + f_bytes(2, raw) + extra


def meta(name: str, *more: bytes) -> bytes:
    return f_bytes(1, f_bytes(1, name) + b"".join(more))


def rejected(body: bytes) -> ApiError:
    with pytest.raises(ApiError) as caught:
        decode(body)
    return caught.value


def test_the_table_builds_and_every_served_kind_has_its_message() -> None:
    t = table()
    for api_version, kind in t.kinds:
        assert t.root(api_version, kind) is t.messages[kind]
    assert t.root("apps/v1", "DeleteOptions") is t.messages["DeleteOptions"]  # every group version has it
    assert t.root("v1", "Deployment") is None and t.root("example.com/v1", "Widget") is None


@pytest.mark.parametrize(
    ("part", "problem"),
    [
        (Part({"A": "b=1:Missing"}), "refers to undeclared message Missing"),
        (Part({"A": "b=1 c=1"}), "declared twice"),
        (Part({"A": "b=1 b=2"}), "declared twice"),
        (Part({"A": "b=x"}), "cannot read field spec"),
        (Part({"A": "b=0"}), "cannot read field spec"),
        (Part({"A": ""}, kinds=(("v1", "B"),)), "kinds without a root message"),
        (Part({"A": ""}, forms={"B": lambda f: f}), "forms for undeclared messages"),
    ],
)
def test_a_table_mistake_fails_the_build(part: Part, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        build(part)


def test_kubectls_own_namespace_body() -> None:
    assert decode(KUBECTL_CREATE_NAMESPACE) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "obs"},  # empty strings, zero generation and zero times are dropped
        "spec": {},
        "status": {},
    }


def test_scalars_zero_values_maps_and_bytes() -> None:
    secret = envelope(
        "v1",
        "Secret",
        meta("s", f_bytes(11, entry("app", f_bytes(2, "x"))), f_int(7, 0), f_int(10, 0))
        + f_bytes(2, entry("token", f_bytes(2, b"\x00\xff")))
        + f_bytes(2, entry("empty", b""))
        + f_bytes(3, "Opaque")
        + f_bytes(4, entry("plain", f_bytes(2, "text")))
        + f_int(5, 0),
    )
    assert decode(secret) == {
        "apiVersion": "v1",
        "kind": "Secret",
        # generation 0 is omitempty (dropped); deletionGracePeriodSeconds 0 is a pointer (kept)
        "metadata": {"name": "s", "labels": {"app": "x"}, "deletionGracePeriodSeconds": 0},
        "data": {"token": base64.b64encode(b"\x00\xff").decode(), "empty": ""},
        "type": "Opaque",
        "stringData": {"plain": "text"},
        "immutable": False,  # a *bool on the wire is kept, even false
    }


def test_nested_messages_inline_structs_int_or_string_quantities_and_negative_numbers() -> None:
    port = f_bytes(6, f_int(3, 8000))
    probe = f_bytes(11, f_bytes(1, f_bytes(2, f_bytes(1, "/health") + f_bytes(2, f_int(1, 1) + f_bytes(3, "http")))))
    resources = f_bytes(8, f_bytes(1, entry("cpu", f_bytes(2, f_bytes(1, "500m")))))
    container = f_bytes(2, f_bytes(1, "vllm") + f_bytes(2, "vllm/vllm") + port + resources + probe)
    volume = f_bytes(1, f_bytes(1, "cache") + f_bytes(2, f_bytes(2, f_bytes(1, "Memory"))))
    spec = volume + container + f_int(4, 30) + f_int(25, -5) + f_bytes(32, entry("cpu", b""))
    rolling = f_bytes(2, f_bytes(1, f_int(2, 0)) + f_bytes(2, f_int(2, 1)))
    deployment = envelope(
        "apps/v1",
        "Deployment",
        meta("d")
        + f_bytes(2, f_int(1, 0) + f_bytes(3, f_bytes(2, spec)) + f_bytes(4, f_bytes(1, "RollingUpdate") + rolling)),
    )
    got = decode(deployment)
    assert got["spec"]["replicas"] == 0  # a pointer: zero replicas is not "unset"
    assert got["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}
    pod = got["spec"]["template"]["spec"]
    assert pod["volumes"] == [{"name": "cache", "emptyDir": {"medium": "Memory"}}]  # VolumeSource inlined
    assert pod["containers"] == [
        {
            "name": "vllm",
            "image": "vllm/vllm",
            "ports": [{"containerPort": 8000}],
            "resources": {"limits": {"cpu": "500m"}},
            "readinessProbe": {"httpGet": {"path": "/health", "port": "http"}},  # ProbeHandler inlined
        }
    ]
    assert (pod["terminationGracePeriodSeconds"], pod["priority"], pod["overhead"]) == (30, -5, {"cpu": "0"})


def test_times_packed_and_unpacked_repeats_doubles_and_raw_json() -> None:
    schema = f_bytes(5, "object") + f_double(9, 2.5) + f_bytes(8, f_bytes(1, b'{"a": [1]}'))
    schema += f_bytes(29, entry("n", f_bytes(2, f_bytes(5, "integer") + f_double(11, 0.0))))
    schema += f_bytes(30, f_int(1, 0)) + f_bytes(24, f_bytes(1, f_bytes(5, "string")))
    version = f_bytes(1, "v1") + f_int(2, 1) + f_int(3, 1) + f_bytes(4, f_bytes(1, schema))
    crd = envelope(
        "apiextensions.k8s.io/v1",
        "CustomResourceDefinition",
        meta("widgets.example.com", f_bytes(8, f_int(1, 1_800_000_000) + f_int(2, 5)))
        + f_bytes(2, f_bytes(1, "example.com") + f_bytes(7, version)),
    )
    got = decode(crd)
    assert got["metadata"]["creationTimestamp"] == "2027-01-15T08:00:00Z"
    assert got["spec"]["versions"][0]["schema"]["openAPIV3Schema"] == {
        "type": "object",
        "maximum": 2.5,
        "default": {"a": [1]},
        "properties": {"n": {"type": "integer", "minimum": 0.0}},
        "additionalProperties": False,
        "items": {"type": "string"},
    }
    lease = envelope(
        "coordination.k8s.io/v1", "Lease", meta("l") + f_bytes(2, f_bytes(4, f_int(1, 1) + f_int(2, 1500)))
    )
    assert decode(lease)["spec"] == {"renewTime": "1970-01-01T00:00:01.000001Z"}
    groups = f_int(4, 1) + f_int(4, 2) + f_bytes(4, varint(3) + varint(4))  # unpacked, then packed
    pod = envelope("v1", "Pod", meta("p") + f_bytes(2, f_bytes(14, groups)))
    assert decode(pod)["spec"]["securityContext"] == {"supplementalGroups": [1, 2, 3, 4]}


def test_token_request_and_extra_values() -> None:
    spec = f_bytes(1, "api") + f_bytes(3, f_bytes(1, "Pod") + f_bytes(3, "web")) + f_int(4, 3600)
    got = decode(envelope("authentication.k8s.io/v1", "TokenRequest", f_bytes(2, spec)))
    assert got["spec"] == {
        "audiences": ["api"],
        "boundObjectRef": {"kind": "Pod", "name": "web"},
        "expirationSeconds": 3600,
    }
    review = f_bytes(2, f_bytes(3, "bob") + f_bytes(5, entry("scopes", f_bytes(2, f_bytes(1, "a") + f_bytes(1, "b")))))
    got = decode(envelope("authorization.k8s.io/v1", "SubjectAccessReview", review))
    assert got["spec"] == {"user": "bob", "extra": {"scopes": ["a", "b"]}}


def _deep_schema(levels: int) -> bytes:
    """A CRD whose schema's ``not`` holds a schema whose ``not`` holds … ``levels`` deep."""
    schema = b""
    for _ in range(levels):
        schema = f_bytes(28, schema)
    version = f_bytes(1, "v1") + f_bytes(4, f_bytes(1, schema))
    return f_bytes(2, f_bytes(7, version))


BAD_BODIES: list[tuple[str, bytes, int, str]] = [
    ("no magic", b'{"kind": "Namespace"}', 400, "no k8s\\x00 magic"),
    ("truncated envelope", b"k8s\x00\x0a\xff", 400, "not a valid Kubernetes protobuf envelope: truncated varint"),
    ("garbage", b"k8s\x00" + bytes(range(200, 256)), 400, "not a valid Kubernetes protobuf envelope"),
    ("no kind", b"k8s\x00" + f_bytes(2, b""), 400, "names no apiVersion and kind"),
    (
        "truncated object",
        envelope("v1", "Namespace", meta("obs") + f_bytes(2, b"\x0a\x05ab")),
        400,
        "not a valid protobuf Namespace at spec: field 1 at byte 0 needs 5 bytes, 2 left (truncated)",
    ),
    (
        "wrong wire type",
        envelope("apps/v1", "Deployment", meta("d") + f_bytes(2, f_bytes(1, b"x"))),
        400,
        "at spec: replicas (field 1) is length-delimited, expected int",
    ),
    (
        "bad UTF-8",
        envelope("v1", "ConfigMap", meta("c", f_bytes(11, entry("k", f_bytes(2, b"\xff"))))),
        400,
        "labels value (field 2) is not valid UTF-8",
    ),
    (
        "unknown and undecoded fields",
        envelope(
            "v1",
            "Pod",
            meta("p") + f_bytes(2, f_bytes(99, b"") + f_bytes(1, f_bytes(1, "v") + f_bytes(2, f_bytes(4, b"")))),
        ),
        400,
        "spec: field 99 of PodSpec; spec.volumes[0].awsElasticBlockStore (VolumeSource field 4)",
    ),
    (
        "time out of range",
        envelope("v1", "Namespace", meta("n", f_bytes(8, f_int(1, 10**15)))),
        400,
        "at metadata.creationTimestamp: time 1000000000000000s 0ns is out of range",
    ),
    (
        "nested too deep",
        envelope("apiextensions.k8s.io/v1", "CustomResourceDefinition", _deep_schema(150)),
        400,
        "messages nested more than 100 deep",
    ),
    ("a kind not read in protobuf", envelope("example.com/v1", "Widget", b""), 415, "not example.com/v1 Widget"),
    (
        "an encoded payload",
        envelope("v1", "Namespace", b"", extra=f_bytes(3, "gzip")),
        415,
        "only plain protobuf is read",
    ),
]


@pytest.mark.parametrize(("body", "code", "message"), [b[1:] for b in BAD_BODIES], ids=[b[0] for b in BAD_BODIES])
def test_bad_bodies_are_refused_with_a_message_naming_the_problem(body: bytes, code: int, message: str) -> None:
    error = rejected(body)
    assert error.code == code and message in error.message, error.message


async def test_a_service_port_without_target_port_defaults_to_its_port() -> None:
    """Protobuf always carries ServicePort.targetPort (zero when unset); the server defaults it as for JSON."""
    ports = f_bytes(1, f_bytes(1, "http") + f_int(3, 8000) + f_bytes(4, b"")) + f_bytes(1, f_int(3, 9000))
    service = decode(envelope("v1", "Service", meta("svc") + f_bytes(2, ports)))
    assert [p.get("targetPort") for p in service["spec"]["ports"]] == [0, None]
    store = Store()
    stored = store.create("Service", service, namespace="default")
    await store.aclose()
    assert [p["targetPort"] for p in stored["spec"]["ports"]] == [8000, 9000]
