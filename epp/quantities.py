"""Kubernetes quantities of bytes (``10Mi``, ``25M``, ``1Gi``), as upstream flags and configs write sizes.

Shared by the flag parser and the ``flowControl`` section so both accept exactly the same strings.
"""

from __future__ import annotations

import re

__all__ = ["parse_quantity"]

_QUANTITY = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|k|K|M|G|T|P|E)?$")
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}


def parse_quantity(text: str) -> int:
    """Bytes in a quantity (a trailing ``B`` as in ``10MiB`` is dropped); raises ValueError otherwise."""
    value = text.strip()
    if len(value) > 1 and value[-1] in "Bb":
        value = value[:-1]
    match = _QUANTITY.match(value)
    if match is None:
        raise ValueError(f"invalid quantity {text!r}")
    suffix = match["suffix"] or ""
    scale = _BINARY.get(suffix) or _DECIMAL.get(suffix) or 1
    return int(float(match["number"]) * scale)
