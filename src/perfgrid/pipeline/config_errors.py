"""What is wrong with a config, in words: :class:`ConfigError` and the schema's checks.

Every message names the config key (``file_read.block_sizes[0]``) and what is allowed,
cut to a readable length. The schema (perfgrid.pipeline.configschema) is checked strictly, with
integers that are ints, numbers that are finite and patterns that match the whole string;
a config too large or too deep to be real is refused before anything walks it.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from perfgrid.pipeline import configschema

#: a real config has a few hundred values; more is a mistake or a YAML alias bomb
MAX_VALUES = 20_000
MAX_DEPTH = 24
#: error messages longer than this are cut (a value's repr can be megabytes)
MAX_MESSAGE = 2_000


class ConfigError(ValueError):
    """A config value perfgrid cannot use; the message names the key."""


def brief(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` cut to ``limit`` characters, saying how much was left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters left out)"


def key_of(path: Iterable[Any]) -> str:
    """``file_read.block_sizes[0]`` from a path of keys and list indexes."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "config"


def check_shape(config: Any) -> None:
    """Refuse a config too large or deep to be real before anything walks it.

    A ~300-byte YAML alias bomb expands to millions of values, and the schema
    check (and its error message) would take minutes and print megabytes.
    Counting stops at the limit, so this is fast whatever the input.
    """
    stack: list[tuple[Any, tuple, int]] = [(config, (), 0)]
    count = 0
    while stack:
        node, path, depth = stack.pop()
        count += 1
        if count > MAX_VALUES or depth > MAX_DEPTH:
            what = (f"more than {MAX_VALUES:,} values" if count > MAX_VALUES
                    else f"nesting deeper than {MAX_DEPTH} levels")
            raise ConfigError(f"{key_of(path)}: the config has {what} (YAML aliases "
                              f"expanding?); a perfgrid config has a few hundred values")
        if isinstance(node, dict):
            stack += [(v, (*path, k), depth + 1) for k, v in node.items()]
        elif isinstance(node, list | tuple):
            stack += [(v, (*path, i), depth + 1) for i, v in enumerate(node)]


def _number_range(schema: dict[str, Any]) -> str:
    bounds = []
    if "minimum" in schema:
        bounds.append(f">= {schema['minimum']}")
    if "exclusiveMinimum" in schema:
        bounds.append(f"> {schema['exclusiveMinimum']}")
    if "maximum" in schema:
        bounds.append(f"<= {schema['maximum']}")
    if "exclusiveMaximum" in schema:
        bounds.append(f"< {schema['exclusiveMaximum']}")
    return f" {' and '.join(bounds)}" if bounds else ""


def allowed(schema: Any) -> str:
    """What a schema node allows, in words."""
    if not isinstance(schema, dict):
        return ""
    if "enum" in schema:
        return f"one of {schema['enum']}"
    kinds = schema.get("type")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds or [])
    words = []
    if "integer" in kinds:
        words.append(f"a whole number without a decimal point{_number_range(schema)}")
    elif "number" in kinds:
        words.append(f"a finite number{_number_range(schema)}")
    if "string" in kinds:
        pattern = schema.get("pattern")
        words.append(f"a string matching {pattern}" if pattern else "a string")
    if "array" in kinds:
        item = allowed(schema.get("items"))
        item = f"({item})" if " or " in item else item
        words.append(f"a list of {item}" if item else "a list")
    if "object" in kinds:
        words.append(f"a mapping of {sorted(schema.get('properties', {}))}"
                     if schema.get("properties") else "a mapping")
    if "null" in kinds:
        words.append("null")
    if not words and "oneOf" in schema:
        words = [allowed(s) for s in schema["oneOf"]]
    text = " or ".join(w for w in words if w)
    description = " ".join(str(schema.get("description", "")).split())
    return f"{text} ({description})" if text and description else text or description


def _deepest(error: Any) -> Any:
    """Inside a ``oneOf`` (``workers: auto`` or a list), the error deepest in the value:
    ``[1, 2.0]`` is wrong at item 1, not as a whole; where no alternative reaches deeper,
    the ``oneOf`` error itself, which names every alternative."""
    while error.validator in ("oneOf", "anyOf") and error.context:
        depth = len(error.absolute_path)
        deeper = [e for e in error.context if len(e.absolute_path) > depth]
        if not deeper:
            break
        error = max(deeper, key=lambda e: len(e.absolute_path))
    return error


def schema_message(error: Any) -> str:
    """``key: what is wrong; allowed: ...`` from a jsonschema ValidationError."""
    error = _deepest(error)
    path = list(error.absolute_path)
    if error.validator == "additionalProperties":
        known = sorted(error.schema.get("properties", {}))
        return brief(f"{key_of(path)}: {error.message}; allowed keys: {known}")
    instance = error.instance
    if isinstance(instance, float) and not math.isfinite(instance):
        what = f"{instance} is not a finite number"
    elif isinstance(instance, float) and instance.is_integer() and error.validator in (
            "type", "oneOf"):
        what = f"{instance!r} is a float; write a whole number ({int(instance)})"
    elif error.validator in ("oneOf", "anyOf"):
        # the one alternative of the value's own kind says why (a list: "non-unique")
        said = [e.message for e in error.context or ()
                if e.validator not in ("type", "enum", "const")]
        what = said[0] if len(said) == 1 else f"{brief(repr(instance), 200)} is not allowed"
    else:
        what = error.message
    return brief(f"{key_of(path)}: {brief(what, 300)}; allowed: {allowed(error.schema)}")


def _finite_number(checker: Any, instance: Any) -> bool:
    if isinstance(instance, bool) or not isinstance(instance, int | float):
        return False
    return isinstance(instance, int) or math.isfinite(instance)


def _whole_integer(checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _full_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[Any]:
    from jsonschema import ValidationError

    if isinstance(instance, str) and not re.fullmatch(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern} as a whole")


@functools.cache
def _strict_validator() -> Any:
    """The schema, with integers that are ints, numbers that are finite, whole-string patterns.

    JSON schema counts 2.0 as an integer and lets NaN past every bound, and
    Python's ``$`` matches before a final newline; perfgrid wants none of it.
    """
    from jsonschema import Draft202012Validator, validators

    checker = Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"integer": _whole_integer, "number": _finite_number})
    strict = validators.extend(Draft202012Validator, {"pattern": _full_pattern},
                               type_checker=checker)
    return strict(configschema.schema())


def check_strict(config: dict[str, Any]) -> None:
    """Raise ConfigError for the first value the schema lets through but perfgrid cannot use."""
    errors = sorted(_strict_validator().iter_errors(config),
                    key=lambda e: [str(p) for p in e.absolute_path])
    if errors:
        raise ConfigError(schema_message(errors[0]))
