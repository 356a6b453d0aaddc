"""endpoint-notification-source: the data-layer source of endpoint lifecycle events, as in the llm-d router.

Upstream (``pkg/epp/framework/plugins/datalayer/source/notifications``) this source hands every
endpoint add/update and delete to the extractors wired under it in ``dataLayer.sources``; it is
how the ``precise-prefix-cache-producer`` learns which pods to subscribe to. Here the runtime
already delivers those events to every plugin with endpoint hooks (``endpoints_added``,
``endpoints_removed``), so this plugin carries no logic of its own: declaring it and wiring a
plugin under it is what upstream's sample configs do, and the loader checks (``config.data_layer``)
that each extractor wired under it is a plugin with those hooks. It takes no parameters, as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind

__all__ = ["TYPE", "EndpointNotificationSource", "create"]

TYPE = "endpoint-notification-source"


class EndpointNotificationSource(NamedPlugin):
    """Marks the ``dataLayer.sources`` entry whose extractors receive endpoint add and remove events."""

    __slots__ = ()
    plugin_type = TYPE
    kinds = frozenset({PluginKind.ENDPOINT_SOURCE})


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> EndpointNotificationSource:
    Params(TYPE, params).done()
    return EndpointNotificationSource(name)
