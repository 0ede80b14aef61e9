"""A small, strict subset of JSON Schema for judges' output_schema.

Judges' verdicts are validated by sweep itself (an agent CLI that says it produced structured
output may not have: see docs/roles.md). Rather than depend on a full JSON Schema library, sweep
accepts only the keywords it can check, and refuses a manifest whose schema uses any other keyword,
so a schema can never look enforced while being silently ignored.

Supported: type (string or list), enum, const, properties, required, additionalProperties (bool or
schema), items, minItems, maxItems, minLength, maxLength, minimum, maximum, plus the annotations
title, description, $schema, $comment, default, examples.
"""
from __future__ import annotations

from typing import Any

_TYPES = {"object", "array", "string", "integer", "number", "boolean", "null"}
_ANNOTATIONS = {"title", "description", "$schema", "$comment", "default", "examples"}
_CHECKED = {"type", "enum", "const", "properties", "required", "additionalProperties", "items",
            "minItems", "maxItems", "minLength", "maxLength", "minimum", "maximum"}


def schema_problems(schema: Any, where: str = "output_schema") -> list[tuple[str, str]]:
    """(field, message) for every part of `schema` sweep could not enforce. Empty = usable."""
    problems: list[tuple[str, str]] = []
    if not isinstance(schema, dict):
        return [(where, "a schema must be a table (JSON object)")]
    for key in schema:
        if key not in _CHECKED and key not in _ANNOTATIONS:
            problems.append((f"{where}.{key}", f"keyword {key!r} is not supported by sweep's validator "
                             f"(supported: {', '.join(sorted(_CHECKED))})"))
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        bad = [k for k in kinds if k not in _TYPES]
        if bad or not kinds:
            problems.append((f"{where}.type", f"unknown type {bad or kind!r}; use one of {sorted(_TYPES)}"))
    if "enum" in schema and (not isinstance(schema["enum"], list) or not schema["enum"]):
        problems.append((f"{where}.enum", "enum must be a non-empty list"))
    props = schema.get("properties")
    if props is not None:
        if not isinstance(props, dict):
            problems.append((f"{where}.properties", "properties must be a table"))
        else:
            for name, sub in props.items():
                problems += schema_problems(sub, f"{where}.properties.{name}")
    required = schema.get("required")
    if required is not None:
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            problems.append((f"{where}.required", "required must be a list of property names"))
        elif isinstance(props, dict):
            missing = [r for r in required if r not in props]
            if missing:
                problems.append((f"{where}.required", f"required names undeclared properties {missing}"))
    extra = schema.get("additionalProperties")
    if extra is not None and not isinstance(extra, bool):
        problems += schema_problems(extra, f"{where}.additionalProperties")
    if "items" in schema:
        problems += schema_problems(schema["items"], f"{where}.items")
    for key in ("minItems", "maxItems", "minLength", "maxLength"):
        if key in schema and (not isinstance(schema[key], int) or isinstance(schema[key], bool) or schema[key] < 0):
            problems.append((f"{where}.{key}", f"{key} must be a non-negative integer"))
    for key in ("minimum", "maximum"):
        if key in schema and (not isinstance(schema[key], (int, float)) or isinstance(schema[key], bool)):
            problems.append((f"{where}.{key}", f"{key} must be a number"))
    return problems


def _type_ok(value: Any, kind: str) -> bool:
    if kind == "object":
        return isinstance(value, dict)
    if kind == "array":
        return isinstance(value, list)
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "null":
        return value is None
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return False


def validate_instance(value: Any, schema: dict[str, Any], where: str = "$") -> list[str]:
    """Every way `value` fails `schema` (a schema that passed `schema_problems`). Empty = valid."""
    problems: list[str] = []
    kind = schema.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        if not any(_type_ok(value, k) for k in kinds):
            return [f"{where}: expected {' or '.join(kinds)}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "const" in schema and value != schema["const"]:
        problems.append(f"{where}: expected {schema['const']!r}")
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                problems.append(f"{where}: missing required property {name!r}")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            if name in props:
                problems += validate_instance(item, props[name], f"{where}.{name}")
            elif extra is False:
                problems.append(f"{where}: unexpected property {name!r}")
            elif isinstance(extra, dict):
                problems += validate_instance(item, extra, f"{where}.{name}")
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            problems.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            problems.append(f"{where}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                problems += validate_instance(item, schema["items"], f"{where}[{i}]")
    if isinstance(value, str):
        if "minLength" in schema and len(value) < schema["minLength"]:
            problems.append(f"{where}: shorter than {schema['minLength']} characters")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            problems.append(f"{where}: longer than {schema['maxLength']} characters")
    if _type_ok(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            problems.append(f"{where}: below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            problems.append(f"{where}: above the maximum {schema['maximum']}")
    return problems
