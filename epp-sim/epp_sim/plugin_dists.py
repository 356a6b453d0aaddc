"""An installed plugin distribution written straight into a directory: what ``pip install`` leaves, for discovery tests.

The picker finds out-of-tree plugin types through the ``epp.plugins`` entry-point group of the
distributions on ``sys.path`` (docs/plugins.md). A test of that discovery (a broken plugin, a name
clash, an incompatible plugin API version) needs distributions that are broken on purpose, which
must not be installed into the test environment itself. :func:`write_distribution` writes one
into a directory of the test's own: its modules and a ``<name>-<version>.dist-info`` folder with
``METADATA`` and ``entry_points.txt``, exactly the files ``importlib.metadata`` reads. Put the
directory on ``sys.path`` (pytest's ``monkeypatch.syspath_prepend``) and the in-process picker
discovers it; pass it in ``PYTHONPATH`` and an ``epp`` process does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

__all__ = ["write_distribution"]


def write_distribution(
    root: Path,
    name: str,
    *,
    version: str = "0.1.0",
    plugins: Mapping[str, str],
    modules: Mapping[str, str],
) -> Path:
    """Write distribution ``name`` into ``root``: ``plugins`` maps each type name to its entry point's
    ``module:attribute``, ``modules`` each module path (``pkg/mod.py``) to its source. Returns ``root``."""
    for path, source in modules.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source, encoding="utf-8")
    info = root / f"{re.sub(r'[-.]+', '_', name)}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n", encoding="utf-8")
    entry_points = "".join(f"{type_name} = {target}\n" for type_name, target in plugins.items())
    (info / "entry_points.txt").write_text(f"[epp.plugins]\n{entry_points}", encoding="utf-8")
    return root
