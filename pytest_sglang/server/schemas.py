"""JSON Schemas of SGLang responses, shipped as package data, and validation against them.

The same files check real servers in the readiness gate and the emulator in its contract
tests, so a drift on either side shows up as a schema failure with a JSON path.
"""

from __future__ import annotations

import functools
import json
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator, ValidationError

from pytest_sglang.config.schema import read_schema

__all__ = ["SchemaViolation", "describe_violations", "validator", "violations"]

#: How much of the body around a violation a message quotes.
EXCERPT_CHARS = 160


@dataclass
class SchemaViolation:
    """One violation of a schema: where, what, and the JSON of the object holding it."""

    schema_name: str
    json_path: str
    message: str
    excerpt: str = ""

    def __str__(self) -> str:
        return f"at {self.json_path}: {self.message} (schema {self.schema_name}.schema.json)"


@functools.cache
def validator(name: str) -> Draft202012Validator:
    """Return the validator of ``schemas/<name>.schema.json``, built once, on first use."""
    from jsonschema import Draft202012Validator

    return Draft202012Validator(read_schema(name))


def _excerpt(instance: Any, error: ValidationError) -> str:
    """Return the JSON of the object at the violation or holding it, cut to ``EXCERPT_CHARS``."""
    steps, holder, key = list(error.absolute_path), error.instance, ""
    if steps and not isinstance(holder, (dict, list)):  # a value: show the object around it
        holder = functools.reduce(operator.getitem, steps[:-1], instance)
        key = json.dumps(steps[-1]) + ":"
    text = json.dumps(holder, default=str)
    if len(text) <= EXCERPT_CHARS:
        return text
    start = max(0, text.find(key) - EXCERPT_CHARS // 3) if key else 0
    end = start + EXCERPT_CHARS
    return ("…" if start else "") + text[start:end] + ("…" if end < len(text) else "")


def violations(instance: object, name: str, limit: int = 5) -> list[SchemaViolation]:
    """Return up to ``limit`` violations of schema ``name``, the most relevant first."""
    from jsonschema.exceptions import relevance

    # jsonschema's own ordering of relevance (best_match's), most relevant first.
    errors = sorted(validator(name).iter_errors(instance), key=relevance, reverse=True)
    return [
        SchemaViolation(name, e.json_path, e.message, _excerpt(instance, e)) for e in errors[:limit]
    ]


def describe_violations(instance: object, name: str, limit: int = 5) -> str | None:
    """Return every violation (up to ``limit``) as message lines with excerpts, or None."""
    found = violations(instance, name, limit)
    if not found:
        return None
    total = sum(1 for _ in validator(name).iter_errors(instance))
    head = f"{total} violation{'s' if total != 1 else ''} of {name}.schema.json"
    if total > len(found):
        head += f" (the first {len(found)} shown)"
    lines = [head + ":"]
    for v in found:
        lines.append(f"  at {v.json_path}: {v.message}")
        lines.append(f"    in: {v.excerpt}")
    return "\n".join(lines)
