"""A pool without Kubernetes: the endpoints file ``file-discovery`` reads, and a picker configuration naming it.

``epp dev --no-kubernetes`` (and the hermetic tests of that mode) run the picker with no API server:
its configuration's ``dataLayer.discovery`` names a ``file-discovery`` plugin watching a file that
lists the simulated servers in upstream's format, and the default profile's scorers (the picker's
defaults: queue, KV cache, prefix cache, LoRA affinity).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

__all__ = ["discovery_config", "endpoints_file"]


def endpoints_file(servers: Iterable[tuple[str, str, int]], labels: Mapping[str, str] | None = None) -> str:
    """The file's text for ``(name, address, port)`` servers (ports written as strings, as upstream's)."""
    entries = [
        {"name": name, "address": address, "port": str(port), **({"labels": dict(labels)} if labels else {})}
        for name, address, port in servers
    ]
    return yaml.safe_dump({"endpoints": entries}, sort_keys=False)


def discovery_config(path: Path, *, watch: bool = True) -> str:
    """A picker configuration whose endpoints come from the file at ``path``."""
    return f"""\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: file-discovery
  parameters:
    path: {path}
    watchFile: {str(watch).lower()}
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: lora-affinity-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: lora-affinity-scorer
dataLayer:
  discovery:
    pluginRef: file-discovery
"""
