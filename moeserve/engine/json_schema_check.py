"""Which JSON Schema keywords a structured output may use: those xgrammar enforces, and annotations.

xgrammar compiles a schema it does not fully enforce without a word (`not`, `if`, `uniqueItems`,
`contains`, `multipleOf` on numbers, unknown formats: the answer would be unconstrained there), so a
schema is walked first and any other keyword is refused, naming it and where it is; so are the
combinations it builds from one keyword alone (a constraint beside `$ref`, `enum` or `anyOf`, a length
beside a `pattern`, a string keyword without `"type": "string"`, ...). Checked against xgrammar 0.2.x
(tests/engine/test_grammar.py compiles each allowed keyword and checks that it constrains).
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
        if key == "$ref" and not (isinstance(value, str) and (value == "#" or value.startswith("#/"))):
            raise UnsupportedSchema(f"the $ref '{str(value)[:60]}' (at {where}) is not supported: only references into "
                                    "the schema itself (\"#\" or \"#/...\") are")
    _check_combinations(node, where)


# xgrammar builds a node with one of these from that keyword alone and drops its other constraints
_EXCLUSIVE = ("$ref", "enum", "const", "anyOf", "oneOf", "allOf")
_BESIDE_ANY = _ANNOTATIONS | {"$defs", "definitions"}
# keywords of one JSON type: xgrammar applies them only where `type` names it (or, for objects and
# arrays, where `properties` / `items` tell the type), and only one of pattern, format and the lengths
_KIND_KEYWORDS = {
    "string": ("minLength", "maxLength", "pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "array": ("items", "prefixItems", "minItems", "maxItems"),
    "object": ("properties", "required", "additionalProperties", "patternProperties", "propertyNames",
               "minProperties", "maxProperties"),
}
_JSON_TYPES = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "null": (type(None),),
               "array": (list,), "object": (dict,)}


def _check_combinations(node: dict[str, Any], where: str) -> None:
    """Refuses keywords that xgrammar accepts but drops where they meet another one."""
    exclusive = [key for key in _EXCLUSIVE if key in node]
    if exclusive:
        first = exclusive[0]
        for key in node:
            if key == first or key in _BESIDE_ANY or (key == "type" and first in ("enum", "const") and
                                                         _values_have_type(node, first)):
                continue
            raise UnsupportedSchema(f"'{key[:40]}' beside '{first}' (at {where}) is not supported: the grammar follows "
                                    f"'{first}' alone there; move the constraint into what '{first}' names")
        return
    types = node.get("type")
    types = {types} if isinstance(types, str) else set(types) if isinstance(types, list) else set()
    if "integer" in types:
        types.add("number")
    if where.endswith("/propertyNames"):  # a property name is a string
        types.add("string")
    inferred = {"object"} if "properties" in node else {"array"} if "items" in node or "prefixItems" in node else set()
    for kind, keys in _KIND_KEYWORDS.items():
        for key in keys:
            if key in node and kind not in types | inferred:
                raise UnsupportedSchema(f"'{key}' (at {where}) needs \"type\": \"{kind}\" beside it: without it the "
                                        "grammar would not enforce it")
    lengths = [key for key in ("pattern", "format", "minLength", "maxLength") if key in node]
    if len(lengths) > 1 and lengths[0] in ("pattern", "format"):
        raise UnsupportedSchema(f"'{lengths[1]}' beside '{lengths[0]}' (at {where}) is not supported: the grammar "
                                f"follows '{lengths[0]}' alone; put the whole constraint in one pattern")
    properties = node.get("properties", {})
    for name in node.get("required", []) if isinstance(node.get("required"), list) else []:
        if name not in properties:
            raise UnsupportedSchema(f"the required property '{str(name)[:40]}' (at {where}) is not in 'properties': "
                                    "the grammar would not enforce it")


def _values_have_type(node: dict[str, Any], key: str) -> bool:
    """Whether every value of an enum or const is of the node's `type` (xgrammar checks none)."""
    values = node[key] if key == "enum" and isinstance(node[key], list) else [node[key]]
    types = node["type"] if isinstance(node["type"], list) else [node["type"]]
    allowed = tuple(t for name in types for t in _JSON_TYPES.get(name, ()))

    def fits(v: Any) -> bool:
        if isinstance(v, bool):
            return "boolean" in types
        if isinstance(v, float) and "integer" in types and v.is_integer():
            return True
        return isinstance(v, allowed)

    return all(fits(v) for v in values)
