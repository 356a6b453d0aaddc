"""What a latency prediction is made from: one (request, endpoint) row of upstream's features, and a training sample.

Upstream's prediction request (``latencypredictorclient/types.go``) carries the endpoint's KV-cache
use, the request's input tokens, the endpoint's waiting and running requests, the prefix-cache
score, the prefill tokens in flight, the pod's role (``pod_type``), tokens generated so far and
multimodal encoder sizes; its training server derives ``is_queued`` and ``effective_input_tokens``
= (1 − prefix score) × input tokens from them (``training_server.py``). :class:`Features` is that
row; :data:`TTFT_COLUMNS` and :data:`TPOT_COLUMNS` are the columns each model is trained on
(upstream's, less those that are constant here: tokens generated — 1 when predicting, 0 in
training, as upstream — in-flight decode tokens and the encoder sizes, which this picker does not
produce).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "COLUMNS",
    "POD_TYPES",
    "TPOT_COLUMNS",
    "TTFT_COLUMNS",
    "Features",
    "Sample",
    "candidate_rows",
    "matrix",
]

POD_TYPES = ("", "prefill", "decode")
"""Upstream's ``pod_type`` values (monolithic, prefill, decode); another role label value counts as ""."""

COLUMNS = (
    "is_queued",
    "kv_cache_percentage",
    "input_token_length",
    "num_request_waiting",
    "num_request_running",
    "prefill_tokens_in_flight",
    "prefix_cache_score",
    "effective_input_tokens",
    "pod_type",
)
"""The columns of a row matrix, in order (``pod_type`` as its index in :data:`POD_TYPES`)."""

TTFT_COLUMNS = tuple(range(len(COLUMNS)))
TPOT_COLUMNS = tuple(COLUMNS.index(c) for c in COLUMNS if c not in ("prefix_cache_score", "effective_input_tokens"))


@dataclass(frozen=True, slots=True)
class Features:
    """One candidate endpoint for one request, as the predictor sees it."""

    kv_cache_percentage: float
    """The endpoint's KV-cache use, 0–1."""
    input_token_length: int
    num_request_waiting: int
    """The engine's waiting queue, as last scraped."""
    num_request_running: int
    """Requests this picker has in flight there (upstream's in-flight snapshot)."""
    prefix_cache_score: float
    """Matched / total prompt blocks on the endpoint, 0–1."""
    prefill_tokens_in_flight: int
    """Tokens this picker has in flight there."""
    pod_type: str = ""

    def row(self) -> tuple[float, ...]:
        """The matrix row (see :data:`COLUMNS`)."""
        waiting = self.num_request_waiting
        pod_type = self.pod_type
        return (
            1.0 if waiting > 0 else 0.0,
            self.kv_cache_percentage,
            float(self.input_token_length),
            float(waiting),
            float(self.num_request_running),
            float(self.prefill_tokens_in_flight),
            self.prefix_cache_score,
            (1.0 - self.prefix_cache_score) * self.input_token_length,
            float(POD_TYPES.index(pod_type)) if pod_type in POD_TYPES else 0.0,
        )

    @staticmethod
    def from_row(row: npt.NDArray[np.float64]) -> Features:
        """The features a matrix row was made from (the inverse of :meth:`row`)."""
        pod = int(row[8])
        return Features(
            kv_cache_percentage=float(row[1]),
            input_token_length=int(row[2]),
            num_request_waiting=int(row[3]),
            num_request_running=int(row[4]),
            prefix_cache_score=float(row[6]),
            prefill_tokens_in_flight=int(row[5]),
            pod_type=POD_TYPES[pod] if 0 <= pod < len(POD_TYPES) else "",
        )

    def bucket(self) -> tuple[int, int, int]:
        """Upstream's sample bucket: queue (0 | 1–2 | 3–5 | 6–10 | 11+), KV (20 × 5%), prefix (4 × 25%)."""
        waiting = self.num_request_waiting
        queue = 0 if waiting == 0 else 1 if waiting <= 2 else 2 if waiting <= 5 else 3 if waiting <= 10 else 4
        kv = min(int(min(max(self.kv_cache_percentage, 0.0), 1.0) * 20), 19)
        prefix = min(int(min(max(self.prefix_cache_score, 0.0), 1.0) * 4), 3)
        return queue, kv, prefix


@dataclass(frozen=True, slots=True)
class Sample:
    """An observation: the features at dispatch and what the response took (ms; 0 = not observed)."""

    features: Features
    ttft_ms: float
    tpot_ms: float


def matrix(rows: Sequence[tuple[float, ...]]) -> npt.NDArray[np.float64]:
    """Rows as a C-ordered float64 matrix (rows × :data:`COLUMNS`)."""
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(COLUMNS))


def candidate_rows(
    *,
    kv_cache: Sequence[float],
    input_tokens: int,
    waiting: Sequence[int],
    running: Sequence[int],
    prefix: Sequence[float],
    in_flight_tokens: Sequence[int],
    pod_types: Sequence[str],
) -> npt.NDArray[np.float64]:
    """The matrix of one request's candidates, a column at a time (what :meth:`Features.row` gives row by row)."""
    out = np.empty((len(kv_cache), len(COLUMNS)), dtype=np.float64)
    out[:, 3] = waiting
    out[:, 0] = out[:, 3] > 0
    out[:, 1] = kv_cache
    out[:, 2] = input_tokens
    out[:, 4] = running
    out[:, 5] = in_flight_tokens
    out[:, 6] = prefix
    out[:, 7] = (1.0 - out[:, 6]) * input_tokens
    out[:, 8] = [POD_TYPES.index(p) if p in POD_TYPES else 0 for p in pod_types]
    return out
