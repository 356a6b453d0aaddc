"""How big a plugin's prefix indexes are: one protocol, read in one place for /metrics and the epp.v1 API.

A plugin that keeps a prefix index (``prefix-cache-scorer``'s approximate one,
``precise-prefix-cache-producer``'s KV-block one, both inside llm-d's all-in-one
``precise-prefix-cache-scorer``) reports each index's entries under the plugin (name and type)
that owns it. :func:`prefix_index_sizes` sums them (``PoolRouting.prefix_index_sizes`` over the
configuration in force); the
``llm_d_epp_prefix_indexer_size{plugin_name, plugin_type}`` series (and GIE's sum,
``inference_extension_prefix_indexer_size``) and the Endpoints API's ``prefix_index_sizes`` both
come from it, so the two always agree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Protocol, runtime_checkable

from epp.framework.plugin import TypedName

__all__ = ["PrefixIndexHolder", "prefix_index_sizes"]


@runtime_checkable
class PrefixIndexHolder(Protocol):
    def prefix_index_sizes(self) -> Mapping[TypedName, int]:
        """Entries of each prefix index this plugin holds, by the plugin (or part) that owns it; cheap (a len)."""
        ...


def prefix_index_sizes(holders: Iterable[PrefixIndexHolder]) -> dict[TypedName, int]:
    """Entries of every index the ``holders`` hold, by the plugin (name, type) owning each."""
    sizes: dict[TypedName, int] = {}
    for holder in holders:
        for owner, size in holder.prefix_index_sizes().items():
            sizes[owner] = sizes.get(owner, 0) + size
    return sizes
