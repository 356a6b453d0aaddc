"""What replicas tell each other: batches pack and unpack, and anything else is refused naming what is wrong."""

from __future__ import annotations

import msgpack
import pytest

from epp.statesync.address import AddressError, redis_url
from epp.statesync.records import IN_FLIGHT, PLUGIN, in_flight_record, pack, unpack


def test_a_batch_round_trips() -> None:
    batch = [(PLUGIN, "prefix", b"\x01\x02"), in_flight_record({"ns/a": (2, 300), "ns/b": (1, 0)})]
    assert unpack(pack(batch)) == [(PLUGIN, "prefix", b"\x01\x02"), (IN_FLIGHT, "", {"ns/a": (2, 300), "ns/b": (1, 0)})]


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"\xc1", "not a state-sync batch"),
        (msgpack.packb({"a": 1}), "not a list"),
        (msgpack.packb([["p", "x"]]), "not a state-sync record"),
        (msgpack.packb([["z", "x", b""]]), "unknown state-sync record kind 'z'"),
        (msgpack.packb([["p", "x", "text, not bytes"]]), "unknown state-sync record kind 'p'"),
        (msgpack.packb([["f", "", [1, 2]]]), "counts must be a map"),
        (msgpack.packb([["f", "", {"ns/a": [-1, 0]}]]), "bad entry 'ns/a'"),
        (msgpack.packb([["f", "", {"ns/a": [True, 0]}]]), "bad entry 'ns/a'"),
        (msgpack.packb([["f", "", {"ns/a": [1]}]]), "bad entry 'ns/a'"),
    ],
)
def test_anything_else_is_refused(data: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        unpack(data)


@pytest.mark.parametrize(
    ("address", "url"),
    [
        ("valkey.ns.svc:6379", "redis://valkey.ns.svc:6379"),
        ("redis://10.0.0.1:6379/0", "redis://10.0.0.1:6379/0"),
        ("valkey://h:1", "redis://h:1"),
        ("valkeys://h:1", "rediss://h:1"),
        ("rediss://user:pw@h:6380", "rediss://user:pw@h:6380"),
        ("unix:///run/valkey.sock", "unix:///run/valkey.sock"),
    ],
)
def test_llm_d_addresses(address: str, url: str) -> None:
    assert redis_url(address) == url


@pytest.mark.parametrize(
    ("address", "problem"),
    [("", "empty"), ("http://h:1", "scheme 'http'"), ("redis://:6379", "no host"), ("redis://h:99999", "h:99999")],
)
def test_bad_addresses(address: str, problem: str) -> None:
    with pytest.raises(AddressError, match=problem):
        redis_url(address)
