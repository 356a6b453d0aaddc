"""The pool modes a hermetic case runs in, and what makes a model servable in each.

The house rule: every case runs in each mode a platform team may deploy the picker in (``v1``,
``v1alpha2``, ``standalone``), unless what it tests does not exist in a mode; such a case runs in
:data:`CRD_MODES` and says why. In a ``v1alpha2`` pool only models with an InferenceModel are
served (others get 404), so cases list their models through :func:`served`.
"""

from __future__ import annotations

from typing import Any

from epp_sim.kube_objects import PoolMode, inference_model
from epp_sim.stack.pool_spec import DEFAULT_POOL, POOL_MODES

__all__ = ["ALL_MODES", "CRD_MODES", "POOL", "served"]

POOL = DEFAULT_POOL
ALL_MODES: tuple[PoolMode, ...] = POOL_MODES
CRD_MODES: tuple[PoolMode, ...] = ("v1", "v1alpha2")
"""Modes with a pool object: objectives, rewrites and pool changes exist only there (standalone watches pods)."""


def served(mode: PoolMode, *models: str, criticality: str = "Standard") -> list[dict[str, Any]]:
    """The InferenceModels that let ``models`` be served in ``mode`` (none are needed outside v1alpha2)."""
    return [inference_model(m, POOL, criticality=criticality) for m in models] if mode == "v1alpha2" else []
