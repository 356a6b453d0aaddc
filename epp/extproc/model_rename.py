"""The response half of a model rewrite: the model server's name for the model, back to the client's.

When the model server was sent another model than the client asked for, every ``"model":"<served>"``
(and the ``"model": "<served>"`` spelling) in the response becomes ``"model":"<client>"``, as
upstream's picker does. Responses arrive in chunks cut anywhere, so a chunk that ends with the
beginning of a match keeps those bytes back until the next chunk says whether they are one; the
end of the response flushes them. Only bytes that may still start a match are held (at most the
length of the longest needle less one), and nothing is held when the chunk's tail cannot start one.
"""

from __future__ import annotations

import json

__all__ = ["ModelRenamer"]


class ModelRenamer:
    """Renames ``served`` to ``client`` in a response fed chunk by chunk; one per response."""

    __slots__ = ("_carry", "_longest", "_pairs")

    def __init__(self, served: str, client: str) -> None:
        old = json.dumps(served, ensure_ascii=False).encode()
        new = json.dumps(client, ensure_ascii=False).encode()
        self._pairs = ((b'"model":' + old, b'"model":' + new), (b'"model": ' + old, b'"model": ' + new))
        self._longest = max(len(needle) for needle, _ in self._pairs)
        self._carry = b""

    def feed(self, chunk: bytes, *, end: bool = False) -> bytes:
        """The renamed bytes that can be released after ``chunk``; everything once ``end``."""
        data = self._carry + chunk if self._carry else chunk
        if end:
            self._carry = b""
            return self._replace(data)
        keep = self._partial_tail(data)
        if keep:
            self._carry = data[-keep:]
            data = data[:-keep]
        else:
            self._carry = b""
        return self._replace(data)

    def _replace(self, data: bytes) -> bytes:
        for needle, replacement in self._pairs:
            if needle in data:
                data = data.replace(needle, replacement)
        return data

    def _partial_tail(self, data: bytes) -> int:
        """The length of the longest tail of ``data`` that is a proper prefix of a needle (0: none).

        Only bytes after the last complete match are tried (a match's closing quote is itself a
        needle's first byte), and since a needle starts with ``"``, only the quotes among the last
        ``longest - 1`` bytes.
        """
        start = max(0, len(data) - (self._longest - 1))
        for needle, _ in self._pairs:
            found = data.rfind(needle, max(0, start - len(needle)))
            if found != -1:
                start = max(start, found + len(needle))
        position = data.find(b'"', start)
        while position != -1:
            tail = data[position:]
            for needle, _ in self._pairs:
                if len(tail) < len(needle) and needle.startswith(tail):
                    return len(tail)
            position = data.find(b'"', position + 1)
        return 0
