"""Which JSON Schema keywords a structured output may use: those xgrammar enforces, and annotations.

xgrammar compiles a schema it does not fully enforce without a word (`not`, `if`, `uniqueItems`,
`contains`, `multipleOf` on numbers, unknown formats: the answer would be unconstrained there), so a
schema is walked first and any other keyword is refused, naming it and where it is. Checked against
xgrammar 0.2.x (tests/engine/test_json_schema_check.py compiles each allowed keyword and checks that
it constrains).
"""
from __future__ import annotations

from typing import Any

# keywords whose subschemas are walked, by the shape they hold them in
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SCHEMA_VALUES = ("items", "additionalProperties", "propertyNames")
# constraints xgrammar enforces (besides the subschema keywords above)
_ENFORCED = frozenset({
    "type", "required", "enum", "const", "$ref", "minItems", "maxItems", "minProperties", "maxProperties",
    "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "pattern", "format",
})
# annotations: they describe, they do not constrain (JSON Schema 2020-12 and OpenAPI's `discriminator`,
# which pydantic writes beside a oneOf whose branches the const of that property tells apart)
_ANNOTATIONS = frozenset({
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "$anchor", "deprecated",
    "readOnly", "writeOnly", "discriminator", "contentMediaType", "contentEncoding", "nullable",
})
# string formats xgrammar turns into a pattern; others would be any string
FORMATS = frozenset({
    "date", "time", "date-time", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri", "uri-reference",
    "uri-template", "json-pointer", "relative-json-pointer",
})
_KNOWN = _ENFORCED | _ANNOTATIONS | frozenset(_SCHEMA_MAPS + _SCHEMA_LISTS + _SCHEMA_VALUES) | {"uniqueItems", "multipleOf"}


class UnsupportedSchema(ValueError):
    """A schema keyword the grammar would not enforce; the message names it and its location."""


def check_json_schema(schema: Any) -> None:
    """Raises UnsupportedSchema for the first keyword of `schema` that xgrammar would not enforce."""
    stack: list[tuple[Any, str]] = [(schema, "#")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict):
            raise UnsupportedSchema(f"{where} is not a schema (an object or true/false)")
        _check_keywords(node, where)
        for key in _SCHEMA_MAPS:
            sub = node.get(key, {})
            if not isinstance(sub, dict):
                raise UnsupportedSchema(f"{where}/{key} must be an object of schemas")
            stack.extend((value, f"{where}/{key}/{name}") for name, value in sub.items())
        for key in _SCHEMA_LISTS:
            sub = node.get(key, [])
            if not isinstance(sub, list):
                raise UnsupportedSchema(f"{where}/{key} must be a list of schemas")
            stack.extend((value, f"{where}/{key}/{i}") for i, value in enumerate(sub))
        stack.extend((node[key], f"{where}/{key}") for key in _SCHEMA_VALUES if key in node)


def _check_keywords(node: dict[str, Any], where: str) -> None:
    for key, value in node.items():
        if key not in _KNOWN:
            raise UnsupportedSchema(f"the JSON schema keyword '{key[:40]}' (at {where}) is not supported: the grammar "
                                    "would not enforce it")
        if key == "uniqueItems" and value is not False:
            raise UnsupportedSchema(f"'uniqueItems' (at {where}) is not supported: a grammar cannot enforce it")
        if key == "multipleOf" and node.get("type") != "integer":
            raise UnsupportedSchema(f"'multipleOf' (at {where}) is supported on integers only (\"type\": \"integer\")")
        if key == "format" and value not in FORMATS:
            raise UnsupportedSchema(f"the string format '{str(value)[:40]}' (at {where}) is not supported; supported: "
                                    f"{', '.join(sorted(FORMATS))}")
        if key == "allOf" and isinstance(value, list) and len(value) > 1:
            raise UnsupportedSchema(f"'allOf' with more than one schema (at {where}) is not supported; merge them into one")
