"""The flattened forest predicts exactly what LightGBM predicts, alone and combined, and survives save/load."""

from __future__ import annotations

import lightgbm
import numpy as np
import pytest

from epp.slo.forest import Forest, combine, from_lightgbm_dump


def _fitted(depth: int, seed: int) -> tuple[lightgbm.Booster, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0, 10, size=(400, 3))
    y = 3 * x[:, 0] + np.where(x[:, 1] > 5, 20.0, 0.0) + rng.normal(0, 1, 400)
    params = {"max_depth": depth, "num_leaves": 1 << depth, "learning_rate": 0.3, "verbosity": -1, "num_threads": 1}
    model = lightgbm.train(params, lightgbm.Dataset(x, label=y, params={"verbosity": -1}), num_boost_round=20)
    return model, rng.uniform(0, 10, size=(50, 3))


@pytest.mark.parametrize("depth", [2, 4])
def test_forest_equals_lightgbm(depth: int) -> None:
    model, rows = _fitted(depth, 1)
    forest = from_lightgbm_dump(model.dump_model(), depth, (0, 1, 2))
    (ours,) = forest.predict(np.ascontiguousarray(rows))
    np.testing.assert_allclose(ours, model.predict(rows), rtol=1e-9, atol=1e-9)


def test_columns_map_the_model_features_onto_the_row() -> None:
    model, rows = _fitted(3, 2)
    # The model saw columns (0, 1, 2); the row has them at 2, 0, 1 behind a column the model never saw.
    forest = from_lightgbm_dump(model.dump_model(), 3, (3, 1, 2))
    wide = np.zeros((len(rows), 4))
    wide[:, 3], wide[:, 1], wide[:, 2] = rows[:, 0], rows[:, 1], rows[:, 2]
    (ours,) = forest.predict(wide)
    np.testing.assert_allclose(ours, model.predict(rows), rtol=1e-9)


def test_combined_forests_predict_each_model_in_one_walk() -> None:
    shallow, rows = _fitted(2, 3)
    deep, _ = _fitted(4, 4)
    a = from_lightgbm_dump(shallow.dump_model(), 2, (0, 1, 2))
    b = from_lightgbm_dump(deep.dump_model(), 4, (0, 1, 2))
    both = combine([a, b])
    assert both.depth == 4 and both.models == (a.trees, a.trees + b.trees)
    first, second = both.predict(np.ascontiguousarray(rows))
    np.testing.assert_allclose(first, shallow.predict(rows), rtol=1e-9)
    np.testing.assert_allclose(second, deep.predict(rows), rtol=1e-9)


def test_saved_arrays_round_trip_and_inconsistent_ones_are_refused() -> None:
    model, rows = _fitted(3, 5)
    forest = from_lightgbm_dump(model.dump_model(), 3, (0, 1, 2))
    arrays = forest.to_arrays("m_")
    again = Forest.from_arrays(arrays, "m_")
    np.testing.assert_array_equal(again.predict(rows)[0], forest.predict(rows)[0])
    arrays["m_leaves"] = arrays["m_leaves"][:, :3]
    with pytest.raises(ValueError, match="inconsistent"):
        Forest.from_arrays(arrays, "m_")


def test_a_tree_deeper_than_the_layout_is_refused() -> None:
    model, _ = _fitted(4, 6)
    with pytest.raises(ValueError, match="deeper"):
        from_lightgbm_dump(model.dump_model(), 2, (0, 1, 2))
