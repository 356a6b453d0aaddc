"""A trained tree ensemble flattened into numpy arrays, so one batched prediction costs a few array operations.

LightGBM trains the models (off the event loop, ``trainer.py``); its own ``predict`` costs about half
a millisecond of Python and C overhead per call, whatever the batch, which a picker cannot pay on
its event loop for every request. So every tree is laid out as a complete binary tree of the
forest's depth (a leaf above the bottom level is copied into every slot under it; the padding
nodes compare against +inf, so they always go left) and a batch of rows walks all trees level by
level at once: ``depth`` steps of gather-compare-shift over an (rows × trees) array, then one
gather of the leaf values and a sum. The result equals LightGBM's prediction (the forest's leaf
values already carry the learning rate and the initial score).

Two models can share one forest (:func:`combine`): their trees are stacked and each model's sum is
taken over its own slice, so the TTFT and TPOT predictions of every candidate are one walk.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["Forest", "combine", "from_lightgbm_dump"]

Floats = npt.NDArray[np.float64]
Ints = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Forest:
    """``features[t, n]`` / ``thresholds[t, n]``: the split of node n (breadth-first) of tree t, going right
    when ``x[feature] > threshold``; ``leaves[t, l]``: the value of leaf slot l; ``models``: the end of each
    model's trees (model i is trees ``models[i-1]:models[i]``)."""

    depth: int
    features: Ints
    thresholds: Floats
    leaves: Floats
    models: tuple[int, ...]
    _tree_base: Ints = field(init=False, repr=False, compare=False)
    _leaf_base: Ints = field(init=False, repr=False, compare=False)
    _flat_features: Ints = field(init=False, repr=False, compare=False)
    _flat_thresholds: Floats = field(init=False, repr=False, compare=False)
    _flat_leaves: Floats = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        trees, inner = self.features.shape[0], (1 << self.depth) - 1
        tree_base = (np.arange(trees, dtype=np.int64) * inner)[None, :]
        object.__setattr__(self, "_tree_base", tree_base)
        object.__setattr__(self, "_leaf_base", (np.arange(trees, dtype=np.int64) << self.depth)[None, :] - inner)
        object.__setattr__(self, "_flat_features", np.ascontiguousarray(self.features.ravel()))
        object.__setattr__(self, "_flat_thresholds", np.ascontiguousarray(self.thresholds.ravel()))
        object.__setattr__(self, "_flat_leaves", np.ascontiguousarray(self.leaves.ravel()))

    @property
    def trees(self) -> int:
        return int(self.features.shape[0])

    def predict(self, rows: Floats) -> list[Floats]:
        """Each model's prediction for every row of ``rows`` (rows × features, float64, C order)."""
        n_rows, width = rows.shape
        flat_rows = rows.ravel()
        row_base = np.arange(0, n_rows * width, width, dtype=np.int64)[:, None]
        tree_base, features, thresholds = self._tree_base, self._flat_features, self._flat_thresholds
        node = np.zeros((n_rows, self.trees), dtype=np.int64)  # breadth-first index within each tree
        for _ in range(self.depth):
            where = tree_base + node
            right = flat_rows[row_base + features[where]] > thresholds[where]
            node += node
            node += 1
            node += right
        values = self._flat_leaves[self._leaf_base + node]
        out: list[Floats] = []
        start = 0
        for end in self.models:
            out.append(values[:, start:end].sum(axis=1))
            start = end
        return out

    def to_arrays(self, prefix: str) -> dict[str, npt.NDArray[Any]]:
        """The forest as named arrays (for ``numpy.savez``)."""
        return {
            f"{prefix}features": self.features,
            f"{prefix}thresholds": self.thresholds,
            f"{prefix}leaves": self.leaves,
            f"{prefix}shape": np.array([self.depth, *self.models], dtype=np.int64),
        }

    @staticmethod
    def from_arrays(arrays: Mapping[str, npt.NDArray[Any]], prefix: str) -> Forest:
        """The inverse of :meth:`to_arrays`; ValueError when the arrays do not describe a forest."""
        shape = [int(v) for v in arrays[f"{prefix}shape"]]
        depth, models = shape[0], tuple(shape[1:])
        features = np.asarray(arrays[f"{prefix}features"], dtype=np.int64)
        thresholds = np.asarray(arrays[f"{prefix}thresholds"], dtype=np.float64)
        leaves = np.asarray(arrays[f"{prefix}leaves"], dtype=np.float64)
        trees = features.shape[0] if features.ndim == 2 else -1
        if (
            not 0 <= depth <= 16
            or features.shape != ((trees, (1 << depth) - 1))
            or thresholds.shape != features.shape
            or leaves.shape != (trees, 1 << depth)
            or not models
            or list(models) != sorted(models)
            or models[-1] != trees
        ):
            raise ValueError("saved forest arrays are inconsistent")
        return Forest(depth, features, thresholds, leaves, models)


def from_lightgbm_dump(dump: Mapping[str, Any], depth: int, columns: Sequence[int]) -> Forest:
    """One model from LightGBM's ``Booster.dump_model()``; ``columns[i]`` is the row column of the model's feature i.

    Every split must be numeric ``<=`` (the features are numbers; no categorical splits) and no tree
    deeper than ``depth``; ValueError otherwise.
    """
    infos = dump["tree_info"]
    trees = len(infos)
    inner = (1 << depth) - 1
    features = np.zeros((trees, inner), dtype=np.int64)
    thresholds = np.full((trees, inner), np.inf)
    leaves = np.zeros((trees, 1 << depth))
    for t, info in enumerate(infos):
        stack: list[tuple[Mapping[str, Any], int, int]] = [(info["tree_structure"], 0, 0)]
        while stack:
            node, level, position = stack.pop()
            if "split_index" not in node:
                span = 1 << (depth - level)
                leaves[t, position * span : (position + 1) * span] = float(node.get("leaf_value", 0.0))
                continue
            if level >= depth:
                raise ValueError(f"tree {t} is deeper than {depth}")
            if node.get("decision_type") != "<=":
                raise ValueError(f"tree {t}: unsupported split {node.get('decision_type')!r}")
            index = (1 << level) - 1 + position
            features[t, index] = columns[int(node["split_feature"])]
            thresholds[t, index] = float(node["threshold"])
            stack.append((node["left_child"], level + 1, 2 * position))
            stack.append((node["right_child"], level + 1, 2 * position + 1))
    return Forest(depth, features, thresholds, leaves, (trees,))


def combine(forests: Sequence[Forest]) -> Forest:
    """One forest holding each of ``forests`` as its own model (same depth), in order."""
    depth = max(f.depth for f in forests)
    parts = [_deepened(f, depth) for f in forests]
    ends: list[int] = []
    total = 0
    for f in parts:
        for end in f.models:
            ends.append(total + end)
        total += f.trees
    return Forest(
        depth,
        np.concatenate([f.features for f in parts]),
        np.concatenate([f.thresholds for f in parts]),
        np.concatenate([f.leaves for f in parts]),
        tuple(ends),
    )


def _deepened(forest: Forest, depth: int) -> Forest:
    """The same forest laid out ``depth`` levels deep (padding nodes go left; leaves repeat)."""
    extra = depth - forest.depth
    if extra == 0:
        return forest
    trees = forest.trees
    features = np.zeros((trees, (1 << depth) - 1), dtype=np.int64)
    thresholds = np.full((trees, (1 << depth) - 1), np.inf)
    features[:, : forest.features.shape[1]] = forest.features
    thresholds[:, : forest.thresholds.shape[1]] = forest.thresholds
    leaves = np.repeat(forest.leaves, 1 << extra, axis=1)
    return Forest(depth, features, thresholds, leaves, forest.models)
