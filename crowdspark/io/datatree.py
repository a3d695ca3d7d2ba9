"""Nested values (dicts, lists, numpy arrays, numbers) as a data-only ``.npz`` archive.

What a checkpoint saves (global parameters, statistics, the history, per-block states) is a tree of
dicts, lists and tuples whose leaves are numpy arrays, numpy scalars and plain JSON values.  It is written
as one ``.npz`` archive: every array (and numpy scalar, as a 0-d array) under a generated name ``a<i>``,
and the tree's shape as a JSON document, UTF-8 bytes in the array ``__tree__``.  Nodes of the document:

* ``null``, ``true``/``false``, numbers and strings: themselves (finite floats round-trip exactly);
* ``{"float": "nan" | "inf" | "-inf"}``: a non-finite Python float;
* ``{"array": "a3"}`` / ``{"scalar": "a4"}``: a numpy array / numpy scalar, with its dtype;
* ``{"dict": {...}}`` (string keys, order kept), ``{"list": [...]}``, ``{"tuple": [...]}``.

Reading uses ``np.load(..., allow_pickle=False)`` and ``json``: a file cannot make the reader run code,
and anything else in it (an object array, an unknown node) is an error.  Values that cannot be stored this
way (object arrays, other classes) raise ``TypeError`` when writing.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

__all__ = ["save_tree", "load_tree", "tree_to_bytes", "tree_from_bytes", "tree_from_arrays"]

#: the archive entry holding the JSON document
DOCUMENT = "__tree__"

_NON_FINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def _encode(value: Any, arrays: dict[str, np.ndarray]) -> Any:
    # numpy first: np.float64 is a float and np.str_ a str, but they come back as numpy scalars
    if isinstance(value, (np.ndarray, np.generic)):
        array = np.asarray(value)
        if array.dtype.hasobject:
            raise TypeError(f"an array of dtype {array.dtype} cannot be stored without pickle")
        name = f"a{len(arrays)}"
        arrays[name] = array
        return {"array" if isinstance(value, np.ndarray) else "scalar": name}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return {"float": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")}
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise TypeError(f"dict keys must be strings to be stored, but got {sorted(map(repr, value))[:3]}")
        return {"dict": {key: _encode(v, arrays) for key, v in value.items()}}
    if isinstance(value, (list, tuple)):
        return {"list" if isinstance(value, list) else "tuple": [_encode(v, arrays) for v in value]}
    raise TypeError(f"a {type(value).__name__} cannot be stored in a data-only archive")


def _decode(node: Any, archive: Any) -> Any:
    if node is None or isinstance(node, (bool, int, float, str)):
        return node
    if isinstance(node, dict) and len(node) == 1:
        (tag, body), = node.items()
        if tag == "float" and body in _NON_FINITE:
            return _NON_FINITE[body]
        if tag in ("array", "scalar") and isinstance(body, str) and body in archive.files and body != DOCUMENT:
            array = archive[body]
            return array if tag == "array" else array[()]
        if tag == "dict" and isinstance(body, dict):
            return {key: _decode(v, archive) for key, v in body.items()}
        if tag == "list" and isinstance(body, list):
            return [_decode(v, archive) for v in body]
        if tag == "tuple" and isinstance(body, list):
            return tuple(_decode(v, archive) for v in body)
    raise ValueError(f"not a node of a crowdspark data archive: {str(node)[:80]}")


def save_tree(target: str | IO[bytes], value: Any) -> None:
    """Write ``value`` to ``target`` (a path or a binary file) as an ``.npz`` archive.

    Raises
    ------
    TypeError
        If ``value`` holds something other than dicts with string keys, lists, tuples, numpy arrays of
        non-object dtype, numpy scalars, ``None``, booleans, numbers and strings.
    """
    arrays: dict[str, np.ndarray] = {}
    document = json.dumps(_encode(value, arrays), allow_nan=False).encode("utf-8")
    np.savez(target, **{DOCUMENT: np.frombuffer(document, dtype=np.uint8)}, **arrays)


def load_tree(source: str | IO[bytes]) -> Any:
    """Read a value written by :func:`save_tree` (never unpickling anything).

    Raises
    ------
    ValueError
        If ``source`` is not such an archive (or holds pickled objects).
    """
    loaded = np.load(source, allow_pickle=False)
    if not isinstance(loaded, np.lib.npyio.NpzFile):
        raise ValueError("not a crowdspark data archive (a single array, not an .npz archive)")
    with loaded as archive:
        if DOCUMENT not in archive.files:
            raise ValueError(f"not a crowdspark data archive (no {DOCUMENT} entry)")
        document = json.loads(archive[DOCUMENT].tobytes().decode("utf-8"))
        return _decode(document, archive)


def tree_to_bytes(value: Any) -> bytes:
    """:func:`save_tree` into bytes."""
    buffer = io.BytesIO()
    save_tree(buffer, value)
    return buffer.getvalue()


def tree_from_bytes(data: bytes) -> Any:
    """:func:`load_tree` from bytes."""
    return load_tree(io.BytesIO(data))


class _Entries:
    """Arrays already read from an archive, looked up by :func:`_decode` as it looks them up in an archive."""

    def __init__(self, arrays: Mapping[str, np.ndarray]) -> None:
        self.files = list(arrays)
        self._arrays = arrays

    def __getitem__(self, name: str) -> np.ndarray:
        return self._arrays[name]


def tree_from_arrays(arrays: Mapping[str, np.ndarray]) -> Any:
    """The value of an archive whose entries (name -> array, :data:`DOCUMENT` among them) were read already,
    e.g. by a reader that checked every entry's size before inflating it.

    Raises
    ------
    ValueError
        If there is no :data:`DOCUMENT` entry, or the document is not one :func:`save_tree` writes.
    """
    if DOCUMENT not in arrays:
        raise ValueError(f"not a crowdspark data archive (no {DOCUMENT} entry)")
    document = json.loads(np.asarray(arrays[DOCUMENT]).tobytes().decode("utf-8"))
    return _decode(document, _Entries(arrays))
