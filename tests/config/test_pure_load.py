"""Loading a configuration is pure: every in-tree plugin type is made on a worker thread and starts nothing.

The runtime loads each configuration (at start, and on every reload of ``--config-file``) on a
worker thread, and drops it when the reload is refused, so a factory may read files but must not
need the event loop, start a task or a thread, open a socket or any other file it keeps, or log:
what a plugin runs starts once its configuration is in force. Each in-tree type is loaded here as
the runtime loads it, and the loop's tasks, the process's threads and open file descriptors, and
the log are the same afterwards. A type added to the registry is loaded too (with the parameters
below when it needs some; a type the picker refuses by name is refused at load, and starts
nothing either), so a new plugin cannot start something at load unnoticed.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from pathlib import Path

import pytest

from epp.config.loader import load_config
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.plugins import register_in_tree
from epp_sim.tiny_tokenizer import write_tiny_tokenizer

REGISTRY = PluginRegistry()
register_in_tree(REGISTRY)
TOKENIZER = "TOKENIZER"
PARAMETERS = {  # the types that do not load without parameters
    "by-label": "{label: app, allowsNoLabel: true}",
    "endpoint-attribute-filter": "{attribute: x, algorithm: {type: threshold, threshold: {operator: Equal, value: 1}}}",
    "endpoint-attribute-scorer": "{attributeKey: x, algorithm: {type: linear_lower_is_better}}",
    "file-discovery": "{path: ENDPOINTS, watchFile: true}",  # read once it runs, watched then
    "header-label-affinity-scorer": "{headerName: x-a, labelKey: a}",
    "no-hit-lru-scorer": "{prefixMatchInfoProducerName: approx-prefix-cache-producer}",
    "prefix-cache-affinity-filter": "{prefixMatchInfoProducerName: approx-prefix-cache-producer}",
    "session-id-producer": "{headerName: x-session-id}",
    "request-attribute-reporter": "{attributes: [{key: {name: t}, expression: usage.total_tokens}]}",
    "token-producer": f"{{modelName: m, local: {{tokenizerPath: {TOKENIZER}}}}}",
    "tokenizer": f"{{modelName: m, local: {{tokenizerPath: {TOKENIZER}}}}}",  # token-producer's old name
    "utilization-filter": "{conditions: [{metric: waiting-queue, maxValue: 5}]}",
}
CASES = [(t, PARAMETERS.get(t, "{}")) for t in sorted(REGISTRY.types()) if REGISTRY.refusal(t) is None] + [
    # central KV-event mode: the producer binds its socket once in force, never at load
    ("precise-prefix-cache-producer", "{kvEventsConfig: {zmqEndpoint: 'tcp://127.0.0.1:5599'}}"),
    # the index on a Valkey/Redis server: connected once in force, never at load
    ("precise-prefix-cache-producer", "{indexerConfig: {kvBlockIndexConfig: {valkeyConfig: {address: 'v:6379'}}}}"),
]


COMPANIONS = {  # the producer a type reads, declared beside it
    "latency-scorer": "predicted-latency-producer",
    "latency-slo-admitter": "predicted-latency-producer",
    "slo-headroom-tier-filter": "predicted-latency-producer",
    "no-hit-lru-scorer": "approx-prefix-cache-producer",
    "prefix-cache-affinity-filter": "approx-prefix-cache-producer",
    "pd-profile-handler": "prefix-based-pd-decider",  # its deciderPluginName's default
}


def config_text(plugin_type: str, parameters: str) -> str:
    companion = COMPANIONS.get(plugin_type)
    prefix = f"- type: {companion}\n" if companion else ""
    return (
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
        f"plugins:\n{prefix}- type: {plugin_type}\n  parameters: {parameters}\n"
    )


def open_files() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def threads() -> set[threading.Thread]:
    """The process's threads, but the default executor's (which ``asyncio.to_thread`` runs the load on)."""
    return {t for t in threading.enumerate() if not t.name.startswith("asyncio_")}


def test_every_type_needing_parameters_is_registered() -> None:
    assert set(PARAMETERS) | set(COMPANIONS) <= set(REGISTRY.types())


@pytest.mark.parametrize(("plugin_type", "parameters"), CASES, ids=[f"{t}{p}" for t, p in CASES])
async def test_loading_starts_nothing(
    plugin_type: str, parameters: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    endpoints = tmp_path / "endpoints.yaml"
    endpoints.write_text("endpoints: []\n")
    parameters = parameters.replace(TOKENIZER, str(write_tiny_tokenizer(tmp_path))).replace("ENDPOINTS", str(endpoints))
    text = config_text(plugin_type, parameters)
    await asyncio.to_thread(lambda: None)  # the executor's thread exists before the counts
    tasks, running, files = asyncio.all_tasks(), threads(), open_files()
    with caplog.at_level(logging.DEBUG):
        loaded = await asyncio.to_thread(
            load_config, text, REGISTRY, PluginContext(pool_name="p"), allow_experimental_plugins=True
        )
    assert plugin_type in loaded.plugins  # named by its type
    assert asyncio.all_tasks() == tasks
    assert threads() == running
    assert open_files() == files
    assert caplog.records == []
