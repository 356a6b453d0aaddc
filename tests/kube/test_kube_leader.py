"""Leader election on a Lease against the fake API server, with time driven by a ManualClock."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from epp.cli import build_parser
from epp.clock import ManualClock
from epp.kube.client import Api, close_api, make_api
from epp.kube.leader import LeaderElector, lease_name
from epp.serve_command import options_from_args
from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver


@pytest.fixture
async def api() -> AsyncIterator[tuple[Api, RunningApiServer]]:
    async with running_apiserver() as server:
        client = await make_api(str(server.kubeconfig))
        try:
            yield client, server
        finally:
            await close_api(client)


def elector(api: Api, identity: str, clock: ManualClock) -> LeaderElector:
    return LeaderElector(api, namespace="default", name=lease_name("default", "pool"), identity=identity, clock=clock)


async def test_one_holder_takeover_after_expiry_and_release(api: tuple[Api, RunningApiServer]) -> None:
    client, server = api
    clock = ManualClock()
    a, b = elector(client, "a", clock), elector(client, "b", clock)
    assert await a.try_acquire_or_renew() is True
    assert await b.try_acquire_or_renew() is False
    clock.advance(10)
    assert await a.try_acquire_or_renew() is True  # renewing keeps it
    assert await b.try_acquire_or_renew() is False
    lease = server.server.store.get("leases", lease_name("default", "pool"), namespace="default")
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseTransitions"] == 0

    clock.advance(16)  # a stopped renewing for longer than leaseDurationSeconds (15)
    assert await b.try_acquire_or_renew() is True
    assert await a.try_acquire_or_renew() is False
    lease = server.server.store.get("leases", lease_name("default", "pool"), namespace="default")
    assert (lease["spec"]["holderIdentity"], lease["spec"]["leaseTransitions"]) == ("b", 1)

    b.is_leader = True
    await b.stop()  # a clean stop releases the lease: a takes over without waiting for expiry
    assert await a.try_acquire_or_renew() is True


def test_timing_parameters_are_validated() -> None:
    with pytest.raises(ValueError, match="retry_period"):
        LeaderElector(None, namespace="d", name="n", identity="i", retry_period=5, renew_deadline=4)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        ((), "epp-ns-pool.gateway-api-inference-extension.sigs.k8s.io"),  # GIE's, and ours so far
        (("--ha-lease-name-style", "gie"), "epp-ns-pool.gateway-api-inference-extension.sigs.k8s.io"),
        (("--ha-lease-name-style=llm-d",), "epp-ns-pool.llm-d.ai"),  # the llm-d router's
    ],
)
def test_the_lease_is_named_as_the_chosen_upstream_names_it(argv: tuple[str, ...], name: str) -> None:
    args = build_parser().parse_args(["serve", "--pool-name", "pool", "--pool-namespace", "ns", *argv])
    options = options_from_args(args)
    assert lease_name(options.pool_namespace, options.pool_names[0], options.lease_name_style) == name


def test_an_unknown_lease_name_style_is_a_flag_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--pool-name", "p", "--ha-lease-name-style", "llmd"])
    assert "--ha-lease-name-style: invalid choice: 'llmd' (choose from" in capsys.readouterr().err
