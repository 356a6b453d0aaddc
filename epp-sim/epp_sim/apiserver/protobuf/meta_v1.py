"""Protobuf table: ``meta/v1`` (object metadata, selectors, times, delete options) and the value types.

Also the apimachinery value types every group uses, with their JSON forms: ``Time`` (RFC 3339,
seconds), ``MicroTime`` (microseconds), ``Quantity`` (its string), ``IntOrString`` (a number or a
string) and ``FieldsV1`` (raw JSON). ``DeleteOptions`` is registered in every group version, so
it is accepted whatever ``apiVersion`` its envelope names.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from epp_sim.apiserver.protobuf.messages import Part
from epp_sim.apiserver.timefmt import rfc3339

__all__ = ["PART"]


def _instant(fields: dict[str, Any]) -> dt.datetime | None:
    seconds, nanos = int(fields.get("seconds", 0)), int(fields.get("nanos", 0))
    if not seconds and not nanos:
        return None  # Go writes a zero time as an empty message; JSON has null
    try:
        return dt.datetime.fromtimestamp(seconds, dt.UTC) + dt.timedelta(microseconds=nanos // 1000)
    except (OverflowError, OSError, ValueError) as e:
        raise ValueError(f"time {seconds}s {nanos}ns is out of range") from e


def _time(fields: dict[str, Any]) -> str | None:
    instant = _instant(fields)
    return None if instant is None else rfc3339(instant.timestamp())


def _micro_time(fields: dict[str, Any]) -> str | None:
    instant = _instant(fields)
    return None if instant is None else instant.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _int_or_string(fields: dict[str, Any]) -> int | str:
    return str(fields.get("strVal", "")) if fields.get("type") == 1 else int(fields.get("intVal", 0))


PART = Part(
    messages={
        "ObjectMeta": """name=1 generateName=2 namespace=3 selfLink=4 uid=5 resourceVersion=6 generation=7:int
            creationTimestamp=8:Time deletionTimestamp=9:Time deletionGracePeriodSeconds=10:int? labels=11:{string}
            annotations=12:{string} ownerReferences=13:[OwnerReference] finalizers=14:[string]
            managedFields=17:[ManagedFieldsEntry]""",
        "OwnerReference": "kind=1? name=3? uid=4? apiVersion=5? controller=6:bool? blockOwnerDeletion=7:bool?",
        "ManagedFieldsEntry": """manager=1 operation=2 apiVersion=3 time=4:Time fieldsType=6 fieldsV1=7:FieldsV1
            subresource=8""",
        "FieldsV1": "raw=1:json",
        "LabelSelector": "matchLabels=1:{string} matchExpressions=2:[LabelSelectorRequirement]",
        "LabelSelectorRequirement": "key=1? operator=2? values=3:[string]",
        "Condition": """type=1? status=2? observedGeneration=3:int lastTransitionTime=4:Time reason=5? message=6?""",
        "DeleteOptions": """gracePeriodSeconds=1:int? preconditions=2:Preconditions orphanDependents=3:bool?
            propagationPolicy=4? dryRun=5:[string] ignoreStoreReadErrorWithClusterBreakingPotential=6:bool?""",
        "Preconditions": "uid=1? resourceVersion=2?",
        "Time": "seconds=1:int nanos=2:int",
        "MicroTime": "seconds=1:int nanos=2:int",
        "Quantity": "string=1",
        "IntOrString": "type=1:int intVal=2:int strVal=3",
    },
    forms={
        "Time": _time,
        "MicroTime": _micro_time,
        "Quantity": lambda fields: fields.get("string", "0"),
        "IntOrString": _int_or_string,
        "FieldsV1": lambda fields: fields.get("raw"),
    },
    kinds=(("*", "DeleteOptions"),),
)
