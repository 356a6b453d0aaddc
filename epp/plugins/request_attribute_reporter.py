"""request-attribute-reporter: a number computed from the response's ``usage``, returned to Envoy as dynamic metadata.

The llm-d router's ``requestcontrol/requestattributereporter``. ``attributes`` holds exactly one
entry: ``key.name`` (required) and ``key.namespace`` (default ``envoy.lb``) say where the value goes,
``expression`` (required) is a CEL expression over ``usage`` computing it, ``condition`` an optional
CEL expression that must be true for the value to be reported. ``usage`` is a
``google.protobuf.Struct`` as upstream's: ``prompt_tokens``, ``completion_tokens`` and
``total_tokens`` always present (0 when the response reported none), ``prompt_tokens_details.
cached_tokens`` when cached tokens were reported; numbers are doubles, so ``usage.prompt_tokens +
1`` fails as it does there (use ``1.0``). The result, an int or a double, is truncated to an
integer; 0, an evaluation error or a result of another type reports nothing (logged). Expressions
are compiled when the configuration loads (a syntax or type error refuses it, naming the field) by
the CEL C++ runtime (``cel-expr-python``), evaluated once per response, when it is complete.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.response import CompletedResponse, Usage

__all__ = ["TYPE", "RequestAttributeReporter", "create"]

TYPE = "request-attribute-reporter"
DEFAULT_NAMESPACE = "envoy.lb"
log = logging.getLogger(__name__)


class RequestAttributeReporter(NamedPlugin):
    __slots__ = ("_condition", "_expression", "key_name", "namespace", "source")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.RESPONSE_STREAMING})

    def __init__(self, name: str, *, namespace: str, key_name: str, expression: str, condition: str = "") -> None:
        super().__init__(name)
        from cel_expr_python import cel  # the CEL runtime is loaded only by a configuration that uses it

        env = cel.NewEnv(variables={"usage": cel.Type("google.protobuf.Struct")})
        self.namespace = namespace
        self.key_name = key_name
        self.source = expression
        self._expression = _compile(env, expression, "expression")
        self._condition = _compile(env, condition, "condition") if condition else None

    def value(self, usage: Usage) -> int | None:
        """The number to report for ``usage``, or None (condition false, evaluation error, 0, not a number)."""
        data = {"usage": _struct(usage)}
        if self._condition is not None:
            verdict = self._condition.eval(data=data).value()
            if verdict is not True:
                if not isinstance(verdict, bool):
                    log.warning("request-attribute-reporter condition did not yield a bool", extra={"result": verdict})
                return None
        result = self._expression.eval(data=data).value()
        if isinstance(result, bool) or not isinstance(result, int | float) or not math.isfinite(result):
            log.warning(
                "request-attribute-reporter expression did not yield a number",
                extra={"plugin": self.typed_name.name, "expression": self.source, "result": str(result)},
            )
            return None
        return int(result) or None

    def response_complete(self, request: InferenceRequest, response: CompletedResponse) -> None:
        value = self.value(response.usage)
        if value is not None:
            response.dynamic_metadata.setdefault(self.namespace, {})[self.key_name] = float(value)


def _compile(env: Any, source: str, field: str) -> Any:
    try:
        return env.compile(source)
    except RuntimeError as e:  # the runtime's own message names the position and the problem
        raise PluginConfigError(f"attributes[0].{field}: does not compile: {e}") from None


def _struct(usage: Usage) -> dict[str, Any]:
    """``usage`` as the ``google.protobuf.Struct`` upstream builds from its Usage (the runtime converts the
    mapping): JSON numbers, so doubles."""
    fields: dict[str, Any] = {
        "prompt_tokens": float(usage.prompt_tokens),
        "completion_tokens": float(usage.completion_tokens),
        "total_tokens": float(usage.total_tokens),
    }
    if usage.cached_tokens:
        fields["prompt_tokens_details"] = {"cached_tokens": float(usage.cached_tokens)}
    return fields


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> RequestAttributeReporter:
    p = Params(TYPE, params)
    entries = p.mappings("attributes")
    p.done()
    if len(entries) != 1:
        raise PluginConfigError(f"{TYPE}.parameters.attributes: must contain exactly one entry, got {len(entries)}")
    entry = entries[0]
    key = entry.nested("key")
    expression = entry.text("expression") or ""
    condition = entry.text("condition") or ""
    entry.done()
    key_name, namespace = "", ""
    if key is not None:
        key_name, namespace = key.text("name") or "", key.text("namespace") or ""
        key.done()
    if not key_name:
        raise PluginConfigError(f"{TYPE}.parameters.attributes[0].key.name: required")
    if not expression.strip():
        raise PluginConfigError(f"{TYPE}.parameters.attributes[0].expression: required")
    try:
        return RequestAttributeReporter(
            name,
            namespace=namespace or DEFAULT_NAMESPACE,
            key_name=key_name,
            expression=expression,
            condition=condition,
        )
    except PluginConfigError as e:
        raise PluginConfigError(f"{TYPE}.parameters.{e}") from None
