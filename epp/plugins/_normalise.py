"""Min-max normalisation shared by the scorers that rank candidates by a load count.

``(max - v) / (max - min)`` over the candidates of one cycle: the least loaded scores 1, the
most loaded 0; all equal → all 1 (upstream ``queuedepth`` and ``runningrequests``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["inverted_min_max"]


def inverted_min_max(values: Sequence[float]) -> list[float]:
    """Each value's place between the largest (0) and the smallest (1)."""
    if not values:
        return []
    low, high = min(values), max(values)
    if high == low:
        return [1.0] * len(values)
    span = high - low
    return [(high - v) / span for v in values]
