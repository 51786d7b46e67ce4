"""The configuration's JSON Schema (``schemas/config.schema.json``) and its error messages.

A violation names the file and TOML table (profiles) or the option and its source, what is
allowed and the fix. An option's ``kind`` names the definition its values must match.
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_sglang.config.options import OptionSpec
from pytest_sglang.config.parsing import usage_error
from pytest_sglang.config.redaction import Redactor, is_secret_name, server_secrets

if TYPE_CHECKING:
    from jsonschema.exceptions import ValidationError

__all__ = ["check_option", "profile_errors", "read_schema", "toml_table"]


@functools.cache
def read_schema(name: str) -> dict[str, Any]:
    """Return the parsed ``pytest_sglang/schemas/<name>.schema.json``."""
    text = resources.files("pytest_sglang").joinpath(f"schemas/{name}.schema.json").read_text()
    schema: dict[str, Any] = json.loads(text)
    return schema


def check_option(spec: OptionSpec, text: str, source: str) -> None:
    """Refuse (a usage error) an option's text that does not match its kind's ``$defs`` entry.

    An option whose kind the schema does not define is not checked (nor jsonschema imported).
    """
    schema = read_schema("config")
    if spec.kind not in schema["$defs"]:
        return
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator({**schema, "$ref": f"#/$defs/{spec.kind}"})
    error = next(validator.iter_errors(text), None)
    if error is not None:
        problem = f"{error.instance!r} is not {error.schema['description']}"
        raise usage_error(spec, source, problem, error.schema["fix"])


def toml_table(*keys: str) -> str:
    """Return a TOML table header, quoting keys that are not bare: ``[profiles."v1.2"]``."""
    bare = {*"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"}
    parts = (k if k and set(k) <= bare else json.dumps(k) for k in keys)
    return "[" + ".".join(parts) + "]"


def profile_errors(tables: object, path: Path | str, prefix: str) -> list[str]:
    """Validate the raw profiles under the dotted table ``prefix``; one message per violation.

    Secrets in the tables never appear in a message.
    """
    # Imported here: jsonschema costs tens of milliseconds, paid only when profiles exist.
    from jsonschema import Draft202012Validator

    schema = read_schema("config")
    errors = Draft202012Validator(schema).iter_errors(tables)
    ordered = sorted(errors, key=lambda e: [str(step) for step in e.absolute_path])
    redact = Redactor(_secrets(tables))
    return [redact(f"{path}: {_describe(e, schema, prefix)}") for e in ordered]


def _secrets(tables: object) -> list[str]:
    """Return the secret values in raw profile tables, as far as their shape allows."""
    found: list[str] = []
    for raw in tables.values() if isinstance(tables, dict) else ():
        args, env = (raw.get("args"), raw.get("env")) if isinstance(raw, dict) else ([], {})
        args, env = args if isinstance(args, list) else [], env if isinstance(env, dict) else {}
        found += server_secrets(args, env)
    return found


def _describe(error: ValidationError, schema: Mapping[str, Any], prefix: str) -> str:
    """Turn one violation into ``[table] key: expected ALLOWED, got VALUE; FIX``."""
    steps = list(error.absolute_path)
    defs = schema["$defs"]
    # What is allowed: the failing subschema says it if it can, else the key's, the
    # profile's, the table's.
    owner = error.validator_value if error.validator == "not" else error.schema
    if not isinstance(owner, Mapping) or "description" not in owner:
        if len(steps) >= 2:
            owner = defs["profile"]["properties"][steps[1]]
        else:
            owner = defs["profile"] if steps else defs["profiles"]
    where = toml_table(*prefix.split("."), *(str(s) for s in steps[:1]))
    if len(steps) > 1:
        where += f" {steps[1]}" + "".join(
            f"[{s}]" if isinstance(s, int) else f".{s}" for s in steps[2:]
        )
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list(defs["profile"]["properties"])
        unknown = sorted(set(error.instance) - set(known))
        close = difflib.get_close_matches(unknown[0], known, n=1)
        hint = f"did you mean {close[0]}? " if close else ""
        return f"{where} {unknown[0]}: unknown key; {hint}valid keys are {', '.join(known)}"
    if "propertyNames" in error.schema_path:
        got = f"got name {json.dumps(error.instance)}"
    elif len(steps) > 2 and steps[1] == "env" and is_secret_name(str(steps[2])):
        got = "got a value not shown (a secret)"
    else:
        got = f"got {_toml(error.instance)}"
    return f"{where}: expected {owner['description']}, {got}; {owner['fix']}"


def _toml(value: object) -> str:
    """Show a TOML value as TOML would write it, shortened: ``"two"``, ``true``, ``[1, 2]``."""
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."
