"""What a latency predictor counts, and the plugins that hold one: mirrored on ``/metrics`` at each scrape.

Plugins import only the framework, so a plugin that runs a latency predictor (in-tree:
``predicted-latency-producer``, whose predictor is ``epp/slo/``'s embedded one or upstream's
sidecars) declares no series. It implements :class:`LatencyPredicting`: just before each scrape
the runtime asks every plugin of the configurations in force (:func:`predictor_stats`) for its
predictor's :class:`PredictorStats` and mirrors them, by plugin name, into the
``epp_latency_predictor_*`` series (``epp/slo/series.py``). Any plugin may: the runtime tests the
capability, not the class. A plugin no longer in force is not asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from epp.framework.plugin import Plugin

__all__ = ["LatencyPredicting", "PredictorStats", "Quality", "predictor_stats"]


@dataclass(frozen=True, slots=True)
class Quality:
    """How a model did on held-out samples (``samples`` of them; 0 when there were too few to judge), as
    ``epp/slo/trainer.py``'s ``quality`` measures it."""

    samples: int
    error: float
    coverage: float


@dataclass(slots=True)
class PredictorStats:
    """Counts since the predictor was made (a configuration reload keeps the predictor, so they continue)."""

    backend: str
    predictions: int = 0
    """Batched predictions answered."""
    prediction_failures: int = 0
    """Batched predictions that could not be made (no model yet counts as a failure only for the remote)."""
    observations: dict[str, int] = field(default_factory=lambda: {"ttft": 0, "tpot": 0})
    """Samples observed, by target."""
    samples: dict[str, int] = field(default_factory=lambda: {"ttft": 0, "tpot": 0})
    """Training samples held now, by target (the embedded predictor's store)."""
    test_samples: dict[str, int] = field(default_factory=lambda: {"ttft": 0, "tpot": 0})
    training_runs: int = 0
    """Models trained (the embedded predictor; the remote trains on its own schedule)."""
    training_failures: int = 0
    """Training runs (embedded) or sample flushes (remote) that failed."""
    samples_sent: int = 0
    """Samples the remote training server accepted."""
    training_seconds: float = 0.0
    """The last training run's duration (wall time on the worker thread)."""
    training_thread: str = ""
    """The name of the thread the last training ran on (never the event loop's)."""
    quality: dict[str, Quality] = field(default_factory=dict)
    """The last trained models' held-out quality, by target."""
    model_ready: bool = False


@runtime_checkable
class LatencyPredicting(Protocol):
    """A plugin that runs a latency predictor (see the module docstring)."""

    def predictor_stats(self) -> PredictorStats | None:
        """The counts of the predictor the plugin holds now; None when it holds none (closed, or handed
        over to its successor on a reload)."""
        ...


def predictor_stats(plugins: Iterable[Plugin]) -> Iterator[tuple[str, PredictorStats]]:
    """(plugin name, counts) for each of ``plugins`` that holds a latency predictor now."""
    for plugin in plugins:
        if isinstance(plugin, LatencyPredicting) and (stats := plugin.predictor_stats()) is not None:
            yield plugin.typed_name.name, stats
