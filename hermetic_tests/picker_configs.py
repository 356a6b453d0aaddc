"""EndpointPickerConfigs more than one hermetic case runs the picker with."""

from __future__ import annotations

__all__ = ["LEGACY_V03", "PD", "PREFIX_ONLY"]

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

PD = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters: {autoTune: false, blockSizeTokens: 16}
- type: prefix-cache-scorer
- type: queue-scorer
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: prefix-based-pd-decider
  parameters: {nonCachedTokens: 64}
- type: disagg-profile-handler
  parameters:
    deciders: {prefill: prefix-based-pd-decider}
schedulingProfiles:
- name: prefill
  plugins:
  - {pluginRef: prefill-filter}
  - {pluginRef: prefix-cache-scorer, weight: 2}
  - {pluginRef: queue-scorer, weight: 1}
- name: decode
  plugins:
  - {pluginRef: decode-filter}
  - {pluginRef: prefix-cache-scorer, weight: 2}
  - {pluginRef: queue-scorer, weight: 1}
"""
"""Upstream's P/D sample, tuned for tests: a prefill when the decode pod lacks 64 tokens or more of the prompt."""

PREFIX_ONLY = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: prefix-cache-scorer}, {pluginRef: max-score-picker}]
"""
"""The approximate prefix index alone decides: where a prompt's prefix was routed before, or anywhere."""
