"""Parameter checks with messages of the form "<name> must be <constraint>, but got <value>".

:func:`coerce_fields` is the one place that brings values to the types their dataclass declares (an
``int`` field given ``1e9`` holds ``1000000000``, a ``float`` field given ``1`` holds ``1.0``).  The
configuration sections and the models call it first thing in ``__post_init__``, so every way a value comes
in (TOML files, ``--set``, keyword arguments, Spark ML Params) ends in the same typed values.
"""

from __future__ import annotations

import difflib
import functools
import math
import numbers
import re
import typing
from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from crowdspark.errors import ConfigError
from crowdspark.faces import display_key

__all__ = ["parse_bytes", "check_int", "check_float", "check_choice", "check_bool", "check_at_most", "coerce", "coerce_fields",
           "did_you_mean"]


def _fail(name: str, constraint: str, value: Any) -> ConfigError:
    return ConfigError(f"{display_key(name)} must be {constraint}, but got {value!r}")


def check_int(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as an int, or raise ConfigError naming ``name``.

    Integers (numpy's too) and integral floats (``1e9``, ``2.0``) are accepted; a bool, a non-integral,
    NaN or infinite float, a string or anything else is not.
    """
    integral = isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not integral:
        raise _fail(name, "an integer", value)
    value = int(value)
    if minimum is not None and value < minimum:
        raise _fail(name, f"an integer >= {minimum}", value)
    if maximum is not None and value > maximum:
        raise _fail(name, f"an integer <= {maximum}", value)
    return value


def check_at_most(name: str, value: int, maximum: int, why: str) -> int:
    """Return ``value`` if it is at most ``maximum``, else ConfigError naming ``name`` and saying ``why``:
    ``"<name> must be at most <maximum>, but got <value>: <why>"``."""
    if value > maximum:
        raise ConfigError(f"{display_key(name)} must be at most {maximum:,}, but got {value!r}: {why}")
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
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
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


def coerce(name: str, value: Any, kind: Any) -> Any:
    """``value`` as the declared type ``kind``, or ConfigError naming ``name``.

    ``int``: :func:`check_int` (``2.0`` -> ``2``; ``2.5``, ``nan``, ``true``, ``"2"`` are errors).
    ``float``: :func:`check_float` (``1`` -> ``1.0``).  ``bool``: :func:`check_bool`.  ``list[X]`` and
    ``tuple[X, ...]`` given a list or tuple: that container of coerced elements (``name[i]``).  Any other
    type (``str``, nested configurations) is returned as it is, for the owner's own checks.
    """
    if kind is int:
        return check_int(name, value)
    if kind is float:
        return check_float(name, value)
    if kind is bool:
        return check_bool(name, value)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    homogeneous = (origin is list and len(args) == 1) or (origin is tuple and len(args) == 2 and args[1] is ...)
    if homogeneous and isinstance(value, (list, tuple)):
        return origin(coerce(f"{name}[{i}]", v, args[0]) for i, v in enumerate(value))
    return value


@functools.cache
def _declared_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce_fields(obj: Any, prefix: str = "") -> None:
    """Set every field of the (frozen) dataclass instance ``obj`` to :func:`coerce` of its value.

    Parameters
    ----------
    obj : dataclass instance
        Called from its ``__post_init__``.
    prefix : str
        Section of the fields in messages (``"ds"`` -> ``"ds.max_iter must be an integer, ..."``).
    """
    types = _declared_types(type(obj))
    for f in fields(obj):
        name = f"{prefix}.{f.name}" if prefix else f.name
        object.__setattr__(obj, f.name, coerce(name, getattr(obj, f.name), types[f.name]))


def did_you_mean(value: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the known name closest to ``value`` (ignoring case), else ``""``."""
    by_lower = {k.lower(): k for k in known}
    close = difflib.get_close_matches(value.lower(), list(by_lower), n=1)
    return f" (did you mean {by_lower[close[0]]!r}?)" if close else ""


#: binary size units of :func:`parse_bytes`
_BYTE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_bytes(name: str, value: Any) -> int:
    """A size in bytes from ``4g``, ``512m``, ``1.5GiB``, ``4000000000`` (binary units: k = 1024), or
    ConfigError naming ``name``."""
    if isinstance(value, bool):
        raise ConfigError(f"{name} must be a size such as \"4g\" or \"512m\", but got {value!r}")
    if isinstance(value, (int, float)) and math.isfinite(value) and value >= 0:
        return int(value)
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*", str(value), flags=re.IGNORECASE)
    if not match:
        raise ConfigError(f"{name} must be a size such as \"4g\" or \"512m\" (k, m, g, t: powers of 1024), "
                          f"but got {value!r}")
    return int(float(match.group(1)) * _BYTE_UNITS[match.group(2).lower()])
