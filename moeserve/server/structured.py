"""The constraint a request asks for: OpenAI's `response_format` or vLLM's `structured_outputs` -> a
StructuredOutputsParams (or None), with a 400 naming the field for anything malformed. The engine
compiles it and refuses what xgrammar cannot enforce (engine/grammar.py); its refusal names the field
the constraint came from (`source_param`)."""
from __future__ import annotations

import json
from typing import Any

from moeserve.engine.chat_prompt import OPENAI_NAME
from moeserve.sampling_params import SamplingParamsError, StructuredOutputsParams
from moeserve.server.api_errors import bad_request, clip

# vLLM's structured_outputs fields; `disable_fallback` and `disable_additional_properties` ask for what
# moeserve always does (it never falls back to an unconstrained answer; JSON objects take only the
# properties their schema names unless it allows more), so they are accepted and change nothing
_FIELDS = ("json", "regex", "choice", "grammar", "json_object", "disable_any_whitespace")
_ALWAYS = ("disable_fallback", "disable_additional_properties")
_REFUSED = {"whitespace_pattern": "xgrammar takes no whitespace pattern; disable_any_whitespace chooses between "
                                  "none and any", "structural_tag": "structural tags are not served"}


def request_constraint(req: Any) -> tuple[StructuredOutputsParams | None, str | None]:
    """(the constraint, the request field it came from) of a chat or completion request."""
    fmt = req.response_format
    if fmt is not None and fmt.type != "text":
        if req.structured_outputs is not None:
            raise bad_request("give response_format or structured_outputs, not both", param="structured_outputs")
        return _from_response_format(fmt), "response_format"
    if req.structured_outputs is not None:
        return _from_structured_outputs(req.structured_outputs), "structured_outputs"
    return None, None


def _from_response_format(fmt: Any) -> StructuredOutputsParams:
    if fmt.type == "json_object":
        return StructuredOutputsParams(json_object=True)
    if fmt.type != "json_schema":
        raise bad_request(f"response_format type '{clip(fmt.type)}' is not supported; use text, json_object or "
                          "json_schema", param="response_format.type")
    spec = fmt.json_schema
    if not isinstance(spec, dict):
        raise bad_request("response_format json_schema needs its json_schema object: {\"name\": ..., \"schema\": {...}}",
                          param="response_format.json_schema")
    name = spec.get("name")
    if name is None:
        raise bad_request("response_format.json_schema.name is required: the schema's name, 1 to 64 letters, digits, "
                          "underscores or dashes", param="response_format.json_schema.name")
    if not isinstance(name, str) or not OPENAI_NAME.fullmatch(name):
        raise bad_request("response_format.json_schema.name must be 1 to 64 letters, digits, underscores or dashes "
                          f"(OpenAI's rule), got {clip(json.dumps(name))}", param="response_format.json_schema.name")
    schema = spec.get("schema", {})  # OpenAI's default: no schema is any JSON value
    if not isinstance(schema, (dict, bool)):
        raise bad_request("response_format.json_schema.schema must be a JSON schema (an object)",
                          param="response_format.json_schema.schema")
    if "strict" in spec and spec["strict"] is not None and not isinstance(spec["strict"], bool):
        raise bad_request("response_format.json_schema.strict must be true or false",
                          param="response_format.json_schema.strict")
    return StructuredOutputsParams(json=schema)  # enforced whether strict or not


def _from_structured_outputs(value: Any) -> StructuredOutputsParams:
    if not isinstance(value, dict):
        raise bad_request("structured_outputs must be an object, e.g. {\"json\": {...}} or {\"regex\": \"...\"}",
                          param="structured_outputs")
    for key in value:
        if key in _REFUSED and value[key] not in (None, False):
            raise bad_request(f"structured_outputs.{key} is not supported: {_REFUSED[key]}", param=f"structured_outputs.{key}")
        if key not in _FIELDS + _ALWAYS + tuple(_REFUSED):
            raise bad_request(f"structured_outputs has no field '{clip(key)}'; it takes {', '.join(_FIELDS)}",
                              param="structured_outputs")
    fields = {k: v for k, v in value.items() if k in _FIELDS and v is not None}
    if fields.get("json_object") is False:
        del fields["json_object"]
    if "disable_any_whitespace" in fields and not isinstance(fields["disable_any_whitespace"], bool):
        raise bad_request("structured_outputs.disable_any_whitespace must be true or false",
                          param="structured_outputs.disable_any_whitespace")
    try:
        return StructuredOutputsParams(**fields)
    except SamplingParamsError as e:
        raise bad_request(str(e), param="structured_outputs") from None
