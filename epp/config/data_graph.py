"""Data declarations → the producers a configuration needs, the order they run in, and each plugin's scope.

Upstream's ``datalayer.CreateMissingDataProducers`` and ``ValidateAndOrderDataDependencies``
(llm-d router ``pkg/epp/datalayer/data_graph.go``), run by the loader once every plugin of the
configuration exists:

1. every key a plugin *requires* must be produced: a missing one gets the type the registry
   names as its default producer (``approx-prefix-cache-producer`` for prefix-match info,
   ``token-producer`` for the tokenized prompt), with default parameters and under its type name,
   and the producers added this way may require further keys in turn (the approximate producer
   reads the tokenized prompt); a key with no default producer, or whose default cannot be added,
   refuses the configuration, naming the consumer and the producer it reads;
2. a consumer and its producer must agree on the value's type, and no producer may run in a
   later layer than its consumer (flow control, then request control, then scheduling);
3. the data producers run in dependency order (config order among independent ones); a cycle
   refuses the configuration, naming its plugins;
4. each plugin that reads or writes request data is handed the :class:`~epp.framework.data.DataScope`
   its declarations allow.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TypeVar

from epp.config.kinds import plays
from epp.config.picker_config import ConfigError
from epp.framework.data import Consuming, DataKey, DataScope, DataScoped, Producing
from epp.framework.plugin import Plugin, PluginKind, PluginRegistry

__all__ = ["DataGraph", "resolve_data"]

PluginT = TypeVar("PluginT", bound=Plugin)

_LAYERS: tuple[tuple[int, frozenset[PluginKind]], ...] = (
    (0, frozenset({PluginKind.FAIRNESS_POLICY, PluginKind.ORDERING_POLICY})),
    (1, frozenset({PluginKind.DATA_PRODUCER, PluginKind.PRE_REQUEST})),
    (2, frozenset({PluginKind.PROFILE_HANDLER, PluginKind.FILTER, PluginKind.SCORER, PluginKind.PICKER})),
)
_LAYER_NAMES = ("flow control", "request control", "scheduling")


@dataclass(frozen=True, slots=True)
class DataGraph:
    """What :func:`resolve_data` found: producer names in run order, and the scopes it handed out."""

    order: tuple[str, ...]
    scopes: tuple[DataScope, ...]

    def ordered(self, plugins: Iterable[PluginT]) -> tuple[PluginT, ...]:
        """``plugins`` (data producers) in dependency order."""
        rank = {name: i for i, name in enumerate(self.order)}
        return tuple(sorted(plugins, key=lambda p: rank.get(p.typed_name.name, len(rank))))


def _describe(plugin: Plugin) -> str:
    return f"plugin {plugin.typed_name.name!r} (type {plugin.typed_name.type!r})"


def _layer(plugin: Plugin) -> int:
    for layer, kinds in _LAYERS:
        if any(plays(plugin, kind) for kind in kinds):
            return layer
    return -1


def _produced(plugins: Mapping[str, Plugin]) -> dict[str, tuple[Plugin, type]]:
    produced: dict[str, tuple[Plugin, type]] = {}
    for plugin in plugins.values():
        if isinstance(plugin, Producing):
            for key, kind in plugin.produces().items():
                produced.setdefault(key.id, (plugin, kind))
    return produced


def _missing(plugins: Mapping[str, Plugin]) -> list[tuple[DataKey, Plugin]]:
    produced = _produced(plugins)
    return [
        (key, plugin)
        for plugin in list(plugins.values())
        if isinstance(plugin, Consuming)
        for key in plugin.consumes().required
        if key.id not in produced
    ]


def _add_producer(
    key: DataKey,
    consumer: Plugin,
    plugins: Mapping[str, Plugin],
    registry: PluginRegistry,
    add_default: Callable[[str], str],
) -> None:
    reads = f"{_describe(consumer)} reads {key.id}"
    holder = plugins.get(key.producer)
    if holder is not None:
        raise ConfigError(f"plugins: {reads}, and {_describe(holder)} does not produce it")
    default = registry.default_producer(key.id)
    if default is None:
        raise ConfigError(
            f"plugins: {reads}, which no plugin produces: declare its producer, a plugin named {key.producer!r}"
        )
    try:
        name = add_default(default)
    except ConfigError as exc:
        raise ConfigError(f"plugins: {reads}; its default producer {default!r} cannot be added: {exc}") from exc
    created = plugins[name]
    if not isinstance(created, Producing) or key not in created.produces():
        raise ConfigError(f"plugins: {reads}; the default producer {default!r} added for it does not produce it")


def _check_edges(plugins: Mapping[str, Plugin]) -> dict[str, list[str]]:
    """Consumer name → producer names it depends on; refuses type and layer mismatches."""
    produced = _produced(plugins)
    edges: dict[str, list[str]] = {}
    for consumer in plugins.values():
        if not isinstance(consumer, Consuming):
            continue
        deps = consumer.consumes()
        for key, wanted in (*deps.required.items(), *deps.optional.items()):
            found = produced.get(key.id)
            if found is None or found[0] is consumer:
                continue
            producer, kind = found
            if kind is not wanted:
                raise ConfigError(
                    f"plugins: {_describe(consumer)} reads {key.id} as {wanted.__name__}, "
                    f"but {_describe(producer)} produces {kind.__name__}"
                )
            before, after = _layer(producer), _layer(consumer)
            if before > after >= 0:
                raise ConfigError(
                    f"plugins: {_describe(producer)} produces {key.id} in the {_LAYER_NAMES[before]} layer, "
                    f"after {_describe(consumer)} reads it in the {_LAYER_NAMES[after]} layer"
                )
            edges.setdefault(consumer.typed_name.name, []).append(producer.typed_name.name)
    return edges


def _topological(names: list[str], edges: Mapping[str, list[str]]) -> tuple[str, ...]:
    """``names`` with every producer before its consumers (Kahn, stable); ConfigError on a cycle."""
    waiting = {name: set(edges.get(name, ())) for name in names}
    order: list[str] = []
    while waiting:
        ready = [name for name in names if name in waiting and not waiting[name]]
        if not ready:
            cycle = sorted(waiting)
            raise ConfigError(f"plugins: the data dependencies of {cycle} form a cycle")
        for name in ready:
            del waiting[name]
            order.append(name)
        for deps in waiting.values():
            deps.difference_update(ready)
    return tuple(order)


def resolve_data(
    plugins: Mapping[str, Plugin], registry: PluginRegistry, add_default: Callable[[str], str]
) -> DataGraph:
    """Add the missing default producers (through ``add_default(type) -> name``, which adds to
    ``plugins``), check and order the graph, and bind each data-scoped plugin's scope."""
    for _ in range(len(plugins) + 16):  # each round adds at least one plugin, and the registry is finite
        missing = _missing(plugins)
        if not missing:
            break
        key, consumer = missing[0]
        _add_producer(key, consumer, plugins, registry, add_default)
    edges = _check_edges(plugins)
    order = _topological(list(plugins), edges)
    scopes: list[DataScope] = []
    for plugin in plugins.values():
        if isinstance(plugin, DataScoped):
            scope = DataScope.of(plugin)
            plugin.bind_data_scope(scope)
            scopes.append(scope)
    return DataGraph(order=order, scopes=tuple(scopes))
