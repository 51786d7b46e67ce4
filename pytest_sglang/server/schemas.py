"""JSON Schemas of SGLang responses, shipped as package data, and validation against them.

The same files check real servers in the readiness gate and the emulator in its contract
tests, so a drift on either side shows up as a schema failure with a JSON path.
"""

from __future__ import annotations

import functools
import json
import operator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator, ValidationError

from pytest_sglang.config.schema import read_schema

__all__ = ["describe_violations", "validator", "violations"]

#: How much of the body around a violation a message quotes.
EXCERPT_CHARS = 160


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


def violations(instance: object, name: str) -> list[ValidationError]:
    """Return every violation of schema ``name``, the most relevant first.

    Each is jsonschema's error: ``json_path`` says where, ``message`` what.
    """
    from jsonschema.exceptions import relevance

    # jsonschema's own ordering of relevance (best_match's), most relevant first.
    return sorted(validator(name).iter_errors(instance), key=relevance, reverse=True)


def describe_violations(instance: object, name: str, limit: int = 5) -> str | None:
    """Return every violation (up to ``limit``) as message lines with excerpts, or None."""
    found = violations(instance, name)
    if not found:
        return None
    head = f"{len(found)} violation{'s' if len(found) != 1 else ''} of {name}.schema.json"
    if len(found) > limit:
        head += f" (the first {limit} shown)"
    lines = [head + ":"]
    for e in found[:limit]:
        lines += [f"  at {e.json_path}: {e.message}", f"    in: {_excerpt(instance, e)}"]
    return "\n".join(lines)
