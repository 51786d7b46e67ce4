"""JSON Schemas of SGLang responses, shipped as package data, and validation against them.

The same files check real servers in the readiness gate and the emulator in its contract
tests, so a drift on either side shows up as a schema failure with a JSON path.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

__all__ = ["SCHEMA_NAMES", "SchemaViolation", "first_violation", "load_schema"]

#: The schemas shipped in ``pytest_sglang/schemas/``.
SCHEMA_NAMES = ("v1_models", "server_info", "model_info", "report")


class SchemaViolation:
    """The first (most relevant) violation of a schema: where and what."""

    def __init__(self, schema_name: str, json_path: str, message: str) -> None:
        self.schema_name = schema_name
        self.json_path = json_path
        self.message = message

    def __str__(self) -> str:
        return f"at {self.json_path}: {self.message} (schema {self.schema_name}.schema.json)"


@functools.cache
def load_schema(name: str) -> dict[str, Any]:
    """Return the parsed JSON Schema ``schemas/<name>.schema.json``."""
    if name not in SCHEMA_NAMES:
        raise ValueError(f"unknown schema {name!r}; known: {', '.join(SCHEMA_NAMES)}")
    text = resources.files("pytest_sglang").joinpath(f"schemas/{name}.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def first_violation(instance: object, name: str) -> SchemaViolation | None:
    """Validate ``instance`` against schema ``name``; return its best violation or None."""
    # Imported here: jsonschema costs tens of milliseconds and plugin import must stay cheap.
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import best_match

    validator = Draft202012Validator(load_schema(name))
    error = best_match(validator.iter_errors(instance))
    if error is None:
        return None
    return SchemaViolation(name, error.json_path, error.message)
