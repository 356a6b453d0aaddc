"""llm-d's ``kvBlockIndexConfig.valkeyConfig`` / ``redisConfig``: which Valkey/Redis server holds the precise index.

Both keys take upstream's ``RedisIndexConfig`` (``address``, ``backendType``, ``enableRDMA``) and
its defaults; ``valkeyConfig`` wins over ``redisConfig`` (and both over ``inMemoryConfig``), and
forces ``backendType`` to ``valkey``. Both are checked when both are given. ``enableRDMA`` is
read (and reported as without effect at load, ``compat.py``): upstream's client has no RDMA
transport either. A bad address is refused naming its field. Once in force, whether the server
answers is the health detail ``kv-index/<namespace>/<pool>/<plugin name>`` (:func:`report_health`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epp.framework.params import Params
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.kvevents.redis_layout import RedisIndexSettings

if TYPE_CHECKING:
    from epp.kvevents.redis_index import RedisBlockIndex

__all__ = ["report_health", "shared_index"]


def shared_index(block_index: Params, plugin_type: str) -> RedisIndexSettings | None:
    """The server ``block_index`` (a ``kvBlockIndexConfig``) names, or None for the in-memory index."""
    chosen: RedisIndexSettings | None = None
    for key, default_address, forced in (
        ("redisConfig", "redis://127.0.0.1:6379", None),
        ("valkeyConfig", "valkey://127.0.0.1:6379", "valkey"),
    ):
        server = block_index.nested(key)
        if server is None:
            continue
        address = server.text("address") or default_address
        backend = server.text("backendType") or "redis"  # upstream: a name in its messages
        backend = forced or backend
        server.boolean("enableRDMA", False)  # checked here; reported as without effect at load (compat.py)
        server.done()
        try:
            chosen = RedisIndexSettings.from_address(address, backend)
        except ValueError as e:  # the address's own error, naming what is wrong
            raise PluginConfigError(
                f"{plugin_type}.parameters.indexerConfig.kvBlockIndexConfig.{key}.address: {e}"
            ) from e
    return chosen


def report_health(index: RedisBlockIndex | None, context: PluginContext, name: str) -> None:
    """Each change of whether ``index``'s server answers sets the plugin's health detail (when there are any)."""
    health = context.health
    if index is not None and health is not None:
        detail = f"kv-index/{context.pool_namespace}/{context.pool_name}/{name}"
        index.on_change = lambda connected: health(detail, connected)
