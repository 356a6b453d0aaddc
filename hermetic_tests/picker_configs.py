"""EndpointPickerConfigs more than one hermetic case runs the picker with."""

from __future__ import annotations

__all__ = ["LEGACY_V03"]

LEGACY_V03 = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: legacy-filter-tree
- type: random-picker
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: legacy-filter-tree}
  - {pluginRef: random-picker}
"""
"""The v0.3 filter tree (upstream's scheduler before plugins), with a random pick among its survivors."""
