"""The declarative message table: each protobuf message of the served kinds, field by field.

Kubernetes publishes the wire schema of its built-in kinds as ``generated.proto`` files; no
package ships them in a usable form, so each group's messages are written down here (the
``tables_*`` modules), in a notation of our own. A message is one string of field specs,
``name=number[:type][?]``, separated by whitespace:

- ``name`` is the field's JSON name; ``..`` is an embedded struct whose fields JSON inlines into
  the parent (``Volume`` embeds ``VolumeSource``);
- ``type`` is ``string`` when omitted, else ``int`` (Go's int32 and int64: signed varints),
  ``bool``, ``double``, ``bytes`` (base64 in JSON), ``json`` (bytes that hold JSON:
  ``RawExtension``, ``FieldsV1``) or a message name; ``[T]`` is a repeated field, ``{T}`` a map
  from strings to T; ``-`` is a field known by name that this server does not decode (a body
  using it is refused with a 400 that names it);
- ``?`` keeps the field's zero value when it is on the wire (Go pointers, and fields that Go's
  JSON always writes); any other zero scalar is dropped, as ``omitempty`` drops it from JSON.

A message whose JSON form is not an object (``Time``, ``IntOrString``, ``Quantity``, …) has a
*form*: a function from its decoded fields to its JSON value. A :class:`Part` is one module's
messages, forms and kinds (``(apiVersion, kind)`` whose root message is named like the kind;
apiVersion ``*`` for ``DeleteOptions``, which every group version registers);
:func:`build` joins the parts into one :class:`Table` and checks that every reference resolves,
so serving another kind is one ``kinds`` entry plus the messages it needs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SCALARS", "UNSUPPORTED", "Field", "Form", "Message", "Part", "Table", "build"]

SCALARS = frozenset({"string", "int", "bool", "double", "bytes", "json"})
UNSUPPORTED = "-"
INLINE = ".."
Form = Callable[[dict[str, Any]], Any]
"""A message's decoded fields → its JSON value; None leaves the field out (a zero Time)."""

_SPEC = re.compile(
    r"^(?P<name>\.\.|[A-Za-z$][\w$-]*)=(?P<number>[1-9]\d*)"
    r"(?::(?P<type>\[\w+\]|\{\w+\}|\w+|-))?(?P<keep>\?)?$"
)


@dataclass(frozen=True, slots=True)
class Field:
    """One field: its number, JSON name, type and shape."""

    number: int
    name: str
    type: str
    repeated: bool = False
    map: bool = False
    keep_zero: bool = False

    @property
    def inline(self) -> bool:
        return self.name == INLINE

    @property
    def scalar(self) -> bool:
        return self.type in SCALARS


@dataclass(frozen=True, slots=True)
class Message:
    name: str
    fields: Mapping[int, Field]
    form: Form | None = None


@dataclass(frozen=True, slots=True)
class Part:
    """One module's contribution: message specs, JSON forms, and the kinds it roots."""

    messages: Mapping[str, str]
    forms: Mapping[str, Form] = field(default_factory=dict)
    kinds: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Table:
    messages: Mapping[str, Message]
    kinds: frozenset[tuple[str, str]]

    def root(self, api_version: str, kind: str) -> Message | None:
        """The message of ``kind`` at ``api_version``, or None when it is not served in protobuf."""
        served = (api_version, kind) in self.kinds or ("*", kind) in self.kinds
        return self.messages[kind] if served else None


def _field(message: str, spec: str) -> Field:
    m = _SPEC.match(spec)
    if m is None:
        raise ValueError(f"protobuf table: {message}: cannot read field spec {spec!r}")
    type_ = m["type"] or "string"
    repeated, is_map = type_.startswith("["), type_.startswith("{")
    if repeated or is_map:
        type_ = type_[1:-1]
    return Field(int(m["number"]), m["name"], type_, repeated, is_map, bool(m["keep"]))


def _message(name: str, spec: str, form: Form | None) -> Message:
    fields: dict[int, Field] = {}
    names: set[str] = set()
    for f in (_field(name, s) for s in spec.split()):
        if f.number in fields or (f.name in names and not f.inline):
            raise ValueError(f"protobuf table: {name}: field {f.name}={f.number} is declared twice")
        fields[f.number] = f
        names.add(f.name)
    return Message(name, fields, form)


def build(*parts: Part) -> Table:
    """Join ``parts`` into one table; a dangling reference or a duplicate is a ValueError."""
    messages: dict[str, Message] = {}
    kinds: set[tuple[str, str]] = set()
    for part in parts:
        for name, spec in part.messages.items():
            if name in messages:
                raise ValueError(f"protobuf table: message {name} is declared twice")
            messages[name] = _message(name, spec, part.forms.get(name))
        if unknown := set(part.forms) - set(part.messages):
            raise ValueError(f"protobuf table: forms for undeclared messages {sorted(unknown)}")
        kinds.update(part.kinds)
    for message in messages.values():
        for f in message.fields.values():
            if not f.scalar and f.type != UNSUPPORTED and f.type not in messages:
                raise ValueError(f"protobuf table: {message.name}.{f.name} refers to undeclared message {f.type}")
    if missing := {kind for _, kind in kinds if kind not in messages}:
        raise ValueError(f"protobuf table: kinds without a root message: {sorted(missing)}")
    return Table(messages, frozenset(kinds))
