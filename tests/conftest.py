"""Marks tests/ as a conftest directory so its shared builders (``scheduling_builders``) import by name.

The autouse fixtures every test shares live in the repository-root ``conftest.py``.
"""
