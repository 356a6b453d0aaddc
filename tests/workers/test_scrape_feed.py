"""A ``--workers`` child's scrapers: the parent's scrape results land on this process's own endpoints of one key."""

from __future__ import annotations

from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework.endpoint import MetricsSnapshot
from epp.framework.health import Health
from epp.labels import parse_selector
from epp.workers.scrape_feed import ScrapeFeed

NS = "default"


def _store() -> Datastore:
    store = Datastore()
    store.set_pool(PoolSpec("pool", NS, parse_selector("app=vllm"), (8000,)))
    store.upsert_pod(PodInfo("a", NS, "10.0.0.1", labels={"app": "vllm"}, ready=True))
    store.upsert_pod(PodInfo("b", NS, "10.0.0.2", labels={"app": "vllm"}, ready=True))
    return store


async def test_results_apply_by_key_only_to_the_endpoint_the_parent_scraped() -> None:
    parent, child = _store(), _store()
    feed = ScrapeFeed(child)
    await feed.start()
    by_name = {s.endpoint.pod_name: s for s in parent.endpoints()}
    feed.endpoints_changed([(1, by_name["a"].endpoint), (2, by_name["b"].endpoint)], [])
    assert feed.scraped == {s.endpoint.key for s in child.endpoints()}
    feed.scraped_results(
        {1: MetricsSnapshot(waiting_queue=3, updated_at=1.0), 2: MetricsSnapshot(waiting_queue=5, updated_at=1.0)},
        [(2, "unreachable", ("connection refused", 1.0))],
    )
    mine = {s.endpoint.pod_name: s for s in child.endpoints()}
    assert mine["a"].metrics.waiting_queue == 3 and mine["b"].metrics.waiting_queue == 5
    assert mine["b"].health.state is Health.UNREACHABLE and mine["a"].health.state is Health.HEALTHY

    # Pod a moves in this process before the parent's news of it: the old address's result is not applied.
    child.upsert_pod(PodInfo("a", NS, "10.0.0.9", labels={"app": "vllm"}, ready=True))
    feed.scraped_results({1: MetricsSnapshot(waiting_queue=7, updated_at=2.0)}, [])
    moved = next(s for s in child.endpoints() if s.endpoint.pod_name == "a")
    assert moved.metrics.waiting_queue == 0
    feed.endpoints_changed([], [1])
    assert feed.scraped == {mine["b"].endpoint.key}
    await feed.stop()
    assert feed.scraped == frozenset()
