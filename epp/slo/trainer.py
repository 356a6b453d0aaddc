"""Training one latency model and judging it on held-out samples; runs on the predictor's worker thread only.

The model is LightGBM's gradient-boosted trees with upstream's objective: the quantile (pinball)
loss at ``quantile`` (0.9, a p90 model) by default, or the squared error (``mean``), as the llm-d
latency predictor's ``LATENCY_OBJECTIVE_TYPE``. The forest is kept small (``TREES`` trees of depth
``DEPTH``, learning rate ``LEARNING_RATE``; upstream trains 200 trees of depth 6 at 0.05) so the
batched prediction on the event loop stays cheap (``forest.py``); docs/scheduling.md ("SLO-aware
routing") has the measurements behind both choices. LightGBM runs its C code with the GIL released.

:func:`quality` is the error metric: the held-out samples are cut into ten groups by predicted
value and, in each, the prediction's mean is compared with the group's observed ``quantile``; the
mean relative difference is the model's error (0.1 = its p90 is off by 10% on average), beside the
coverage (the fraction of observations at or under their prediction: 0.9 for a calibrated p90).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from epp.framework.latency_predictor import Quality
from epp.slo.forest import Forest, from_lightgbm_dump

__all__ = ["DEPTH", "LEARNING_RATE", "TREES", "quality", "train"]

TREES = 32
DEPTH = 4
LEARNING_RATE = 0.25
_GROUPS = 10

Floats = npt.NDArray[np.float64]


def train(rows: Floats, targets: Floats, columns: Sequence[int], *, objective: str, quantile: float) -> Forest:
    """A forest fitted to ``targets`` from ``rows[:, columns]`` (in the row matrix's column numbering)."""
    import lightgbm  # noqa: PLC0415  (imported on the worker thread: its import takes a while)

    # LightGBM's own API (not its scikit-learn wrapper, which needs scikit-learn installed).
    params: dict[str, Any] = {
        "max_depth": DEPTH,
        "num_leaves": 1 << DEPTH,
        "learning_rate": LEARNING_RATE,
        "bagging_fraction": 0.8,
        "bagging_freq": 1,
        "feature_fraction": 0.8,
        "min_data_in_leaf": min(20, max(1, len(targets) // 10)),
        "lambda_l1": 0.1,
        "lambda_l2": 0.1,
        "num_threads": 1,
        "seed": 42,
        "verbosity": -1,
    }
    if objective == "mean":
        params["objective"] = "regression"
    else:
        params.update(objective="quantile", alpha=quantile)
    data = lightgbm.Dataset(np.ascontiguousarray(rows[:, list(columns)]), label=targets, params={"verbosity": -1})
    booster = lightgbm.train(params, data, num_boost_round=TREES)
    return from_lightgbm_dump(booster.dump_model(), DEPTH, columns)


def quality(predicted: Floats, observed: Floats, quantile: float) -> Quality:
    """The decile-grouped relative error of ``predicted`` against the observed ``quantile``, and the coverage."""
    n = len(observed)
    if n < _GROUPS * 5:
        return Quality(n, 0.0, 0.0)
    order = np.argsort(predicted, kind="stable")
    errors = []
    for group in np.array_split(order, _GROUPS):
        expected = float(np.quantile(observed[group], quantile))
        if expected > 0:
            errors.append(abs(float(np.mean(predicted[group])) - expected) / expected)
    coverage = float(np.mean(observed <= predicted))
    return Quality(n, float(np.mean(errors)) if errors else 0.0, coverage)
