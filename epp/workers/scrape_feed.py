"""A ``--workers`` child's scrapers: its parent's scrape results, applied to this process's own endpoints.

The parent's :class:`~epp.datalayer.scrape_process.ScrapeProcess` numbers each endpoint it scrapes and
tells every child (``endpoints_changed``) and forwards each batch (``scraped``). A child follows the
pool itself, so its endpoints are its own objects: an id's result is applied to this process's
endpoint of the same key, and only while that endpoint is the one the parent scraped (an endpoint
replaced meanwhile gets nothing until the parent scrapes its successor). The scrape spec is the
parent's: a reload's spec reaches the scrape worker through the parent, so :meth:`ScrapeFeed.apply`
has nothing to do here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from epp.datalayer.scrape_process import apply_scrape_results
from epp.datalayer.scrape_wire import HealthEvent
from epp.datalayer.scraper import EndpointSource
from epp.framework.datalayer import ScrapeSpec
from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot

__all__ = ["ScrapeFeed"]


class ScrapeFeed:
    """The :class:`~epp.datalayer.scraper.Scrapers` of a child: fed, never scraping."""

    def __init__(self, datastore: EndpointSource) -> None:
        self._datastore = datastore
        self._scraped: dict[int, Endpoint] = {}
        """The parent's ids of the endpoints it scrapes."""
        self._states: dict[str, EndpointState] = {}
        """This process's endpoints by key."""
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def scraped(self) -> frozenset[str]:
        """Keys of this process's endpoints the parent scrapes now."""
        return frozenset(e.key for e in self._scraped.values() if e.key in self._states)

    async def start(self) -> None:
        if self._unsubscribe is None:
            self._unsubscribe = self._datastore.subscribe(self._on_change)
            self._on_change(self._datastore.endpoints(), ())

    def apply(self, spec: ScrapeSpec | None) -> None:
        """Nothing: the parent's scrape worker scrapes by the configuration in force (see the module)."""

    async def stop(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._states.clear()

    def _on_change(self, added: Sequence[EndpointState], removed: Sequence[EndpointState]) -> None:
        states = self._states
        for state in removed:
            if states.get(state.endpoint.key) is state:
                del states[state.endpoint.key]
        for state in added:
            states[state.endpoint.key] = state

    def endpoints_changed(self, added: Sequence[tuple[int, Endpoint]], gone: Sequence[int]) -> None:
        for eid in gone:
            self._scraped.pop(eid, None)
        self._scraped.update(added)

    def scraped_results(self, snapshots: Mapping[int, MetricsSnapshot], health: Sequence[HealthEvent]) -> None:
        apply_scrape_results(self._state_of, snapshots, health)

    def _state_of(self, eid: int) -> EndpointState | None:
        endpoint = self._scraped.get(eid)
        if endpoint is None:
            return None
        state = self._states.get(endpoint.key)
        return state if state is not None and state.endpoint == endpoint else None
