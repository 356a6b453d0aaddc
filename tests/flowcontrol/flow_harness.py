"""A flow controller over a pool the test controls, on an injected clock (the flow-control tests' harness)."""

from __future__ import annotations

from collections.abc import Sequence

from scheduling_builders import NOW, state

from epp.clock import ManualClock
from epp.config.loader import LoadedConfig, load_config
from epp.flowcontrol.controller import FlowController
from epp.flowcontrol.queues import Item
from epp.framework.endpoint import EndpointState
from epp.framework.plugin import NamedPlugin, PluginContext, PluginRegistry
from epp.framework.request import InferenceRequest
from epp.plugins import register_in_tree
from epp.telemetry.metrics import EppMetrics

__all__ = ["BUSY", "IDLE", "Pool", "dispatched", "started"]

IDLE = state(1, queue=0)
BUSY = state(1, queue=5)  # queue / queueDepthThreshold = 1.0: saturated


class Pool:
    """A controller over a pool whose one endpoint the test makes idle, busy or absent."""

    def __init__(self, flow_control: str, *, extra: str = "", plugins: Sequence[type[NamedPlugin]] = ()) -> None:
        self.clock = ManualClock(NOW)
        self.metrics = EppMetrics()
        registry = PluginRegistry()
        register_in_tree(registry)
        for plugin in plugins:  # test plugin types, made by name alone
            registry.register(plugin.plugin_type, lambda name, parameters, context, cls=plugin: cls(name))
        text = (
            "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\n"
            "plugins:\n- type: utilization-detector\n  parameters: {metricsStalenessThreshold: 1000h}\n"
            f"{extra}flowControl:\n{flow_control}"
        )
        self.config: LoadedConfig = load_config(text, registry, PluginContext(clock=self.clock))
        assert self.config.flow_control is not None
        self.endpoints: list[EndpointState] = [BUSY]
        self.fc = FlowController(
            self.config.flow_control,
            pool_name="pool",
            endpoints=lambda: self.endpoints,
            detector=lambda: self.config.saturation_detector,
            clock=self.clock,
            metrics=self.metrics,
        )
        self._seq = 0
        self.items: list[Item] = []

    def request(self, *, priority: int = 0, tenant: str = "", size: int = 100) -> InferenceRequest:
        self._seq += 1
        headers = {"x-gateway-inference-fairness-id": tenant} if tenant else {}
        return InferenceRequest(
            request_id=f"r{self._seq}", model="m", target_model="m", priority=priority, headers=headers, size=size
        )

    def enqueue(self, request: InferenceRequest) -> Item:
        item = self.fc.enqueue(request)
        self.items.append(item)
        return item

    def sample(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


async def started(pool: Pool) -> Pool:
    await pool.fc.start()
    return pool


def dispatched(items: list[Item]) -> list[str]:
    return [i.request.request_id for i in items if i.future.done() and i.future.exception() is None]
