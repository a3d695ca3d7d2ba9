"""Parameter checks with messages of the form "<name> must be <constraint>, but got <value>"."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from crowdspark.errors import ConfigError

__all__ = ["check_int", "check_float", "check_choice", "check_bool"]


def _fail(name: str, constraint: str, value: Any) -> ConfigError:
    return ConfigError(f"{name} must be {constraint}, but got {value!r}")


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int, or raise ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int,)) and not (
        isinstance(value, float) and value.is_integer()
    ):
        raise _fail(name, "an integer", value)
    value = int(value)
    if minimum is not None and value < minimum:
        raise _fail(name, f"an integer >= {minimum}", value)
    if maximum is not None and value > maximum:
        raise _fail(name, f"an integer <= {maximum}", value)
    return value


def check_float(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    strict_min: bool = False,
    strict_max: bool = False,
) -> float:
    """Return ``value`` as a finite float within bounds, or raise ConfigError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _fail(name, "a finite number", value)
    value = float(value)
    if minimum is not None and (value <= minimum if strict_min else value < minimum):
        raise _fail(name, f"a number {'>' if strict_min else '>='} {minimum:g}", value)
    if maximum is not None and (value >= maximum if strict_max else value > maximum):
        raise _fail(name, f"a number {'<' if strict_max else '<='} {maximum:g}", value)
    return value


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> Any:
    """Return ``value`` if it is one of ``choices``."""
    choices = list(choices)
    if value not in choices:
        raise _fail(name, f"one of {choices}", value)
    return value


def check_bool(name: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _fail(name, "true or false", value)
    return value
