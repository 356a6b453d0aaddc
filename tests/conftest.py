"""Marks tests/ as a conftest directory so its shared builders (``scheduling_builders``) import by name.

The autouse fixtures every test shares live in the repository-root ``conftest.py``; fixtures
here are asked for by name: the root-logger restorer (the shared tokenizer, ``tokenizer_dir``, is
the root ``conftest.py``'s).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def restore_root_logger() -> Iterator[None]:
    """Undo what a test's ``setup_logging`` did to the root logger and the HTTP client loggers."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)
    logging.captureWarnings(False)
    logging.getLogger("httpx").setLevel(logging.NOTSET)
    logging.getLogger("httpcore").setLevel(logging.NOTSET)
