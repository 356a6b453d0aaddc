"""The embedded latency predictor: trained on the picker's own observations, off the event loop, predicting in-process.

What upstream runs as two sidecars (a training server and prediction servers, an HTTP call per
request), here in the picker:

- **samples** (``samples.py``) are kept on the event loop, bounded per bucket as upstream's;
- **training** runs on one worker thread the predictor owns (``epp-latency-train``), never on the
  loop: every ``retrain_interval`` the loop hands the thread a copy of the samples if new ones came
  and there are enough (``min_samples``, or ``min_samples_fresh`` while there is no model yet, as
  upstream's ``LATENCY_MIN_SAMPLES_FOR_RETRAIN`` / ``_FRESH``); the thread fits a TTFT and a TPOT
  model (``trainer.py``), judges them on the held-out samples and returns one combined forest,
  which the loop swaps in with one assignment;
- **prediction** for every candidate of a request is one walk of that forest (``forest.py``) on the
  loop, in microseconds;
- **state**: with ``state_file`` the models and samples are loaded when the predictor starts and
  saved after every training run and at close (``numpy.savez``, written to a temporary file and
  renamed, on the worker thread), so a restarted replica is not cold. A configuration reload keeps
  the predictor itself (the producer hands it to its successor).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from epp.framework.latency_predictor import PredictorStats, Quality
from epp.slo.features import TPOT_COLUMNS, TTFT_COLUMNS, Sample
from epp.slo.forest import Forest, combine
from epp.slo.predictor import BulkPrediction
from epp.slo.samples import SampleStore, Snapshot, saved_snapshot
from epp.slo.trainer import quality, train
from epp.tasks import cancel_and_wait, start_guarded

__all__ = ["EmbeddedPredictor", "EmbeddedSettings"]

log = logging.getLogger(__name__)

_FORMAT = 1
_TARGETS = ("ttft", "tpot")
_COLUMNS = {"ttft": TTFT_COLUMNS, "tpot": TPOT_COLUMNS}


@dataclass(frozen=True, slots=True)
class EmbeddedSettings:
    """Upstream's training-server settings that apply here (names in docs/scheduling.md)."""

    objective: str = "quantile"
    quantile: float = 0.9
    retrain_interval: float = 10.0
    min_samples: int = 100
    min_samples_fresh: int = 10
    per_bucket: int = 500
    state_file: str = ""


@dataclass(frozen=True, slots=True)
class _Model:
    """The forest in force and which targets it predicts (model i of the forest is ``targets[i]``)."""

    forest: Forest
    targets: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Trained:
    forests: dict[str, Forest]
    quality: dict[str, Quality]
    seconds: float
    thread: str


class EmbeddedPredictor:
    """Samples, a training thread and an in-process model; see the module docstring."""

    def __init__(self, settings: EmbeddedSettings, *, seed: int | None = None) -> None:
        self.settings = settings
        rng = random.Random(seed)
        self._stores = {target: SampleStore(settings.per_bucket, rng) for target in _TARGETS}
        self._model: _Model | None = None
        self._trained_at: dict[str, int] = dict.fromkeys(_TARGETS, -1)
        self._executor: ThreadPoolExecutor | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.stats = PredictorStats(backend="embedded")

    # -- on the event loop -----------------------------------------------------------------------

    async def predict(self, rows: npt.NDArray[np.float64]) -> BulkPrediction | None:
        self._start()
        model = self._model
        if model is None or not len(rows):
            return None
        outputs = dict(zip(model.targets, model.forest.predict(rows), strict=True))
        ttft = outputs.get("ttft")
        if ttft is None:
            return None
        tpot = outputs.get("tpot")
        self.stats.predictions += 1
        return BulkPrediction(
            np.maximum(ttft, 0.0).tolist(),
            np.maximum(tpot, 0.0).tolist() if tpot is not None else [0.0] * len(rows),
        )

    def observe(self, sample: Sample) -> None:
        self._start()
        features = sample.features
        bucket = features.bucket()
        row = features.row()
        for target, value in (("ttft", sample.ttft_ms), ("tpot", sample.tpot_ms)):
            if value > 0:
                store = self._stores[target]
                store.add(bucket, row, value)
                self.stats.observations[target] += 1
                self.stats.samples[target] = store.size
                self.stats.test_samples[target] = store.test_size

    async def aclose(self, *, save: bool = True) -> None:
        """Stop training; save the state (when there is a state file, the predictor was used and ``save``)."""
        if self._closed:
            return
        self._closed = True
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if task is not None and self.settings.state_file and save:
            await self._save()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    def _start(self) -> None:
        """The training loop, from the first use on the running loop (a plugin is built before there is one)."""
        if self._task is None and not self._closed:
            self._worker()
            self._task = start_guarded(self._run(), name="epp-latency-predictor")

    def _worker(self) -> ThreadPoolExecutor:
        executor = self._executor
        if executor is None:
            executor = self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="epp-latency-train")
        return executor

    async def load(self) -> None:
        """Load the state file now, without starting the training loop (which loads it when it starts)."""
        self._worker()
        await self._load()

    async def _run(self) -> None:
        if self.settings.state_file:
            await self._load()
        while True:
            await asyncio.sleep(self.settings.retrain_interval)
            await self.train_now()

    async def train_now(self, *, force: bool = False) -> bool:
        """One training run if there are new samples (or ``force``) and enough of them; True when a model was
        trained."""
        due = {}
        for target, store in self._stores.items():
            needed = self.settings.min_samples if self._has(target) else self.settings.min_samples_fresh
            if (force or store.added != self._trained_at[target]) and store.size >= needed:
                due[target] = (store.snapshot(), store.added)
        if not due:
            return False
        snapshots = {target: snapshot for target, (snapshot, _) in due.items()}
        try:
            trained = await asyncio.get_running_loop().run_in_executor(self._worker(), self._fit, snapshots)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bad fit keeps the model in force; the next run tries again
            self.stats.training_failures += 1
            log.exception("latency model training failed")
            return False
        for target, (_, added) in due.items():
            self._trained_at[target] = added
        self._swap(trained.forests)
        stats = self.stats
        stats.training_runs += 1
        stats.training_seconds = trained.seconds
        stats.training_thread = trained.thread
        stats.quality.update(trained.quality)
        log.info(
            "latency models trained",
            extra={
                "targets": sorted(trained.forests),
                "seconds": round(trained.seconds, 3),
                **{f"{t}_p90_error": round(q.error, 3) for t, q in trained.quality.items()},
            },
        )
        if self.settings.state_file:
            await self._save()
        return True

    def _has(self, target: str) -> bool:
        model = self._model
        return model is not None and target in model.targets

    def _swap(self, forests: dict[str, Forest]) -> None:
        """New forests replace their targets' models; the others stay."""
        current: dict[str, Forest] = {}
        model = self._model
        if model is not None:
            parts = _split(model)
            current.update(parts)
        current.update(forests)
        targets = tuple(t for t in _TARGETS if t in current)
        self._model = _Model(combine([current[t] for t in targets]), targets)
        self.stats.model_ready = "ttft" in targets

    # -- on the worker thread --------------------------------------------------------------------

    def _fit(self, snapshots: dict[str, Snapshot]) -> _Trained:
        start = time.perf_counter()
        settings = self.settings
        forests: dict[str, Forest] = {}
        judged: dict[str, Quality] = {}
        for target, snapshot in snapshots.items():
            forest = train(
                snapshot.rows,
                snapshot.targets,
                _COLUMNS[target],
                objective=settings.objective,
                quantile=settings.quantile,
            )
            forests[target] = forest
            if len(snapshot.test_targets):
                (predicted,) = forest.predict(snapshot.test_rows)
                judged[target] = quality(predicted, snapshot.test_targets, settings.quantile)
        return _Trained(forests, judged, time.perf_counter() - start, threading.current_thread().name)

    # -- state -------------------------------------------------------------------------------------

    async def _save(self) -> None:
        arrays: dict[str, Any] = {"format": np.array([_FORMAT])}
        for target, store in self._stores.items():
            arrays.update(store.arrays(f"{target}_samples_"))
        model = self._model
        if model is not None:
            for target, forest in _split(model).items():
                arrays.update(forest.to_arrays(f"{target}_model_"))
        executor = self._executor
        try:
            if executor is None:
                await asyncio.to_thread(_write, self.settings.state_file, arrays)
            else:
                await asyncio.get_running_loop().run_in_executor(executor, _write, self.settings.state_file, arrays)
        except OSError as e:
            log.warning("latency predictor state not saved", extra={"file": self.settings.state_file, "error": str(e)})

    async def _load(self) -> None:
        path = self.settings.state_file
        try:
            arrays = await asyncio.get_running_loop().run_in_executor(self._worker(), _read, path)
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError) as e:
            log.warning("latency predictor state not loaded: starting cold", extra={"file": path, "error": str(e)})
            return
        try:
            restored = {t: saved_snapshot(arrays, f"{t}_samples_") for t in _TARGETS}
            forests = {t: Forest.from_arrays(arrays, f"{t}_model_") for t in _TARGETS if f"{t}_model_shape" in arrays}
        except (ValueError, KeyError) as e:
            log.warning("latency predictor state not loaded: starting cold", extra={"file": path, "error": str(e)})
            return
        for target, (snapshot, buckets) in restored.items():
            store = self._stores[target]
            store.restore(snapshot, buckets)
            self.stats.samples[target] = store.size
            self.stats.test_samples[target] = store.test_size
        if forests:
            self._swap(forests)
        log.info("latency predictor state loaded", extra={"file": path, "models": sorted(forests)})


def _split(model: _Model) -> dict[str, Forest]:
    """The model's forest cut back into one forest per target."""
    forest = model.forest
    out: dict[str, Forest] = {}
    start = 0
    for target, end in zip(model.targets, forest.models, strict=True):
        out[target] = Forest(
            forest.depth,
            forest.features[start:end],
            forest.thresholds[start:end],
            forest.leaves[start:end],
            (end - start,),
        )
        start = end
    return out


def _write(path: str, arrays: dict[str, Any]) -> None:
    directory = os.path.dirname(path) or "."
    temporary = os.path.join(directory, f".{os.path.basename(path)}.tmp")
    with open(temporary, "wb") as f:
        np.savez_compressed(f, **arrays)
    os.replace(temporary, path)


def _read(path: str) -> dict[str, Any]:
    with np.load(path, allow_pickle=False) as data:
        if int(data["format"][0]) != _FORMAT:
            raise ValueError(f"unknown state format {int(data['format'][0])}")
        return {name: data[name] for name in data.files}
