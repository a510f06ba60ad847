"""A channel's JSON Schema checked the way the Foxglove lineage's viewers parse it.

Foxglove Studio and Lichtblick turn a ``jsonschema`` channel's schema into the fields their
panels offer (Plot, Raw Messages). As documented and as measured with the apps (issue 22), they
take a root ``"type": "object"`` with ``properties``, and in each property one type name:
``boolean``, ``string``, ``number``, ``integer``, ``object`` (its own ``properties``) or ``array``
(its ``items``). Anything else, a list of types such as ``["number", "null"]`` included, makes
the whole channel "Failed to parse channel schema" and its panels stay empty. Written from that
behaviour, not from their code.
"""

from __future__ import annotations

FIELD_TYPES = frozenset({"boolean", "string", "number", "integer", "object", "array"})


def foxglove_schema_problems(schema: object) -> list[str]:
    """What a Foxglove-lineage viewer would refuse in ``schema`` (empty: it parses)."""
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return ["the root is not a JSON Schema of type 'object'"]
    problems: list[str] = []
    _check_properties(schema.get("properties", {}), "", problems)
    return problems


def _check_properties(properties: object, path: str, problems: list[str]) -> None:
    if not isinstance(properties, dict):
        problems.append(f"{path or 'the root'}: 'properties' is not an object")
        return
    for key, field in properties.items():
        _check_field(field, f"{path}{key}", problems)


def _check_field(field: object, path: str, problems: list[str]) -> None:
    if not isinstance(field, dict):
        problems.append(f"{path}: not a schema object")
        return
    kind = field.get("type")
    if not isinstance(kind, str) or kind not in FIELD_TYPES:
        problems.append(f"{path}: unsupported type {kind!r}")
    elif kind == "object":
        _check_properties(field.get("properties", {}), f"{path}.", problems)
    elif kind == "array":
        _check_field(field.get("items"), f"{path}[]", problems)
