"""The bounded store of observations a model is trained on, bucketed as upstream's training server keeps them.

Upstream (``training_server.py``) files each sample under (queue bucket, KV bucket, prefix bucket),
each bucket holding at most ``LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET`` (500) samples and
dropping a random one when full, so a long run of one load level cannot crowd out the others;
about 10% of samples go to a held-out test set instead (at most 1000, oldest dropped). One
:class:`SampleStore` per target (TTFT or TPOT); it lives on the event loop and hands the trainer a
copy (:meth:`snapshot`), never itself.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from epp.slo.features import COLUMNS, matrix

__all__ = ["SampleStore", "Snapshot", "saved_snapshot"]

_TEST_SIZE = 1000
_TEST_FRACTION = 0.1

Row = tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A copy of a store: training rows and targets, held-out rows and targets."""

    rows: npt.NDArray[np.float64]
    targets: npt.NDArray[np.float64]
    test_rows: npt.NDArray[np.float64]
    test_targets: npt.NDArray[np.float64]


class SampleStore:
    """Training samples by bucket (each at most ``per_bucket``) and the held-out set."""

    __slots__ = ("_buckets", "_rng", "_test", "added", "per_bucket", "size")

    def __init__(self, per_bucket: int, rng: random.Random) -> None:
        self.per_bucket = per_bucket
        self._rng = rng
        self._buckets: dict[tuple[int, int, int], list[tuple[Row, float]]] = {}
        self._test: deque[tuple[Row, float]] = deque(maxlen=_TEST_SIZE)
        self.size = 0
        """Training samples held."""
        self.added = 0
        """Samples ever added (training and test): the trainer retrains when this moved."""

    @property
    def test_size(self) -> int:
        return len(self._test)

    def add(self, bucket: tuple[int, int, int], row: Row, target: float) -> None:
        self.added += 1
        rng = self._rng
        if rng.random() < _TEST_FRACTION:
            self._test.append((row, target))
            return
        samples = self._buckets.get(bucket)
        if samples is None:
            samples = self._buckets[bucket] = []
        if len(samples) >= self.per_bucket:
            samples[rng.randrange(len(samples))] = (row, target)
        else:
            samples.append((row, target))
            self.size += 1

    def snapshot(self) -> Snapshot:
        train = [s for samples in self._buckets.values() for s in samples]
        test = list(self._test)
        return Snapshot(
            matrix([r for r, _ in train]),
            np.array([t for _, t in train], dtype=np.float64),
            matrix([r for r, _ in test]),
            np.array([t for _, t in test], dtype=np.float64),
        )

    def restore(self, snapshot: Snapshot, buckets: npt.NDArray[np.int64]) -> None:
        """Put saved samples back (``buckets``: each training row's bucket, as saved by :meth:`arrays`)."""
        for row, target, bucket in zip(snapshot.rows, snapshot.targets, buckets, strict=True):
            key = (int(bucket[0]), int(bucket[1]), int(bucket[2]))
            samples = self._buckets.setdefault(key, [])
            if len(samples) < self.per_bucket:
                samples.append((tuple(float(v) for v in row), float(target)))
                self.size += 1
        for row, target in zip(snapshot.test_rows, snapshot.test_targets, strict=True):
            self._test.append((tuple(float(v) for v in row), float(target)))

    def arrays(self, prefix: str) -> dict[str, npt.NDArray[np.float64] | npt.NDArray[np.int64]]:
        """The store as named arrays (for ``numpy.savez``)."""
        keys = [key for key, samples in self._buckets.items() for _ in samples]
        snapshot = self.snapshot()
        return {
            f"{prefix}rows": snapshot.rows,
            f"{prefix}targets": snapshot.targets,
            f"{prefix}buckets": np.array(keys, dtype=np.int64).reshape(len(keys), 3),
            f"{prefix}test_rows": snapshot.test_rows,
            f"{prefix}test_targets": snapshot.test_targets,
        }


def saved_snapshot(arrays: dict[str, npt.NDArray[np.float64]], prefix: str) -> tuple[Snapshot, npt.NDArray[np.int64]]:
    """A snapshot and its buckets from :meth:`SampleStore.arrays`' output; ValueError when inconsistent."""
    rows, targets = arrays[f"{prefix}rows"], arrays[f"{prefix}targets"]
    test_rows, test_targets = arrays[f"{prefix}test_rows"], arrays[f"{prefix}test_targets"]
    buckets = np.asarray(arrays[f"{prefix}buckets"], dtype=np.int64)
    width = len(COLUMNS)
    if (
        rows.ndim != 2
        or rows.shape[1] != width
        or targets.shape != (rows.shape[0],)
        or buckets.shape != (rows.shape[0], 3)
        or test_rows.ndim != 2
        or test_rows.shape[1] != width
        or test_targets.shape != (test_rows.shape[0],)
    ):
        raise ValueError("saved samples are inconsistent")
    return Snapshot(rows, targets, test_rows, test_targets), buckets
