"""soft-reflective-ceiling-policy: a flow-control usage limit that gates lower-priority bands first as saturation rises.

The llm-d router's ``flowcontrol/usagelimits/softreflectiveceiling``. With ``N`` bands (highest
priority first), band ``i`` reflects at ``1 − i × saturation / (N − 1)``: below it the band is open
(ceiling 1.0); at or past it, once saturation reaches 1.0 it is closed (0.0); otherwise it
alternates, open on one dispatch cycle in ``round(saturation / (1 − saturation))``, so its
dispatch rate falls continuously with saturation. The highest band is always 1.0 (it stops only
at saturation 1.0), one band alone is always open. Every gated band reads the same policy-wide
tick, so on a given cycle they are all open or all closed (the dispatch loop stops at the first
gated band). The tick advances only on cycles where some band alternates. No parameters (any are
refused). Upstream registers it Alpha; it is not a default: name it in
``flowControl.usageLimitPolicyPluginRef``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind

__all__ = ["TYPE", "SoftReflectiveCeiling", "create"]

TYPE = "soft-reflective-ceiling-policy"


class SoftReflectiveCeiling(NamedPlugin):
    __slots__ = ("tick",)
    plugin_type = TYPE
    kinds = frozenset({PluginKind.USAGE_LIMIT_POLICY})

    def __init__(self, name: str = TYPE) -> None:
        super().__init__(name)
        self.tick = 0

    def ceilings(self, saturation: float, priorities: Sequence[int]) -> Sequence[float]:
        n = len(priorities)
        if n <= 1:
            return [1.0] * n
        open_now = False
        if 1.0 - saturation <= saturation < 1.0:  # the lowest band (hence some band) alternates
            period = max(1, math.floor(saturation / (1.0 - saturation + 1e-9) + 0.5))  # Go's math.Round
            self.tick += 1
            open_now = self.tick % period == 0
        ceilings = [1.0]
        for i in range(1, n):
            if saturation < 1.0 - i * saturation / (n - 1):
                ceilings.append(1.0)
            elif saturation >= 1.0:
                ceilings.append(0.0)
            else:
                ceilings.append(1.0 if open_now else 0.0)
        return ceilings


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> SoftReflectiveCeiling:
    Params(TYPE, params).done()
    return SoftReflectiveCeiling(name)
