"""Pod roles in disaggregated serving: the ``llm-d.ai/role`` label and the stages each value serves.

Upstream's vocabulary (llm-d router ``filter/bylabel/roles.go``): ``prefill``, ``decode``,
``encode``, and the combined ``prefill-decode``, ``encode-prefill``, ``encode-prefill-decode``;
``both`` is the deprecated spelling of ``prefill-decode``. Matching is exact: a label present with
an empty or unknown value serves no stage a role filter selects.

Two readers, with upstream's two slightly different rules:

- the role filters (:data:`DECODE_SELECTOR` and friends): a pod *without* the label serves decode
  (an aggregated pool keeps routing), never prefill or encode;
- flow control's stage-aware saturation (:func:`saturation_stages`): the label's value, or an
  empty one, puts a pod in the prefill stage, the decode stage or both; encode-only and unknown
  values count in neither.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "BOTH",
    "DECODE",
    "DECODE_SELECTOR",
    "ENCODE",
    "ENCODE_PREFILL",
    "ENCODE_PREFILL_DECODE",
    "ENCODE_SELECTOR",
    "PREFILL",
    "PREFILL_DECODE",
    "PREFILL_SELECTOR",
    "ROLE_LABEL",
    "RoleSelector",
    "Stage",
    "saturation_stages",
]

ROLE_LABEL = "llm-d.ai/role"

PREFILL = "prefill"
DECODE = "decode"
ENCODE = "encode"
PREFILL_DECODE = "prefill-decode"
ENCODE_PREFILL = "encode-prefill"
ENCODE_PREFILL_DECODE = "encode-prefill-decode"
BOTH = "both"
"""Deprecated upstream: ``prefill-decode``."""


class Stage(enum.StrEnum):
    """A stage of a disaggregated request (upstream's E, P and D)."""

    ENCODE = "encode"
    PREFILL = "prefill"
    DECODE = "decode"


@dataclass(frozen=True, slots=True)
class RoleSelector:
    """The ``llm-d.ai/role`` values a stage accepts; ``unlabelled``: whether a pod without the label is one."""

    roles: frozenset[str]
    unlabelled: bool

    def accepts(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(ROLE_LABEL)
        return self.unlabelled if value is None else value in self.roles


DECODE_SELECTOR = RoleSelector(frozenset({DECODE, PREFILL_DECODE, BOTH, ENCODE_PREFILL_DECODE}), unlabelled=True)
PREFILL_SELECTOR = RoleSelector(
    frozenset({PREFILL, ENCODE_PREFILL, PREFILL_DECODE, BOTH, ENCODE_PREFILL_DECODE}), unlabelled=False
)
ENCODE_SELECTOR = RoleSelector(frozenset({ENCODE, ENCODE_PREFILL, ENCODE_PREFILL_DECODE}), unlabelled=False)

_PREFILL_ONLY = frozenset({Stage.PREFILL})
_DECODE_ONLY = frozenset({Stage.DECODE})
_INTERLEAVED = frozenset({Stage.PREFILL, Stage.DECODE})
_NONE: frozenset[Stage] = frozenset()
_SATURATION_STAGES: Mapping[str, frozenset[Stage]] = {
    PREFILL: _PREFILL_ONLY,
    ENCODE_PREFILL: _PREFILL_ONLY,
    DECODE: _DECODE_ONLY,
    "": _DECODE_ONLY,
    PREFILL_DECODE: _INTERLEAVED,
    BOTH: _INTERLEAVED,
    ENCODE_PREFILL_DECODE: _INTERLEAVED,
}


def saturation_stages(labels: Mapping[str, str]) -> frozenset[Stage]:
    """The stages whose capacity a pod counts in (upstream ``partitionEndpoints``): none for encode-only or unknown."""
    return _SATURATION_STAGES.get(labels.get(ROLE_LABEL, ""), _NONE)
