"""Additive sufficient statistics.

A statistic is a ``dict`` from a name to a numpy array (a count table, a scalar sum).  Statistics of two
blocks of items combine by adding arrays name by name; the empty dict is the zero.  This is the whole
contract that lets the Spark engine tree-reduce what the local engine sums in a loop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

__all__ = ["Stats", "add_stats", "sum_stats"]

Stats = dict[str, np.ndarray]


def add_stats(a: Mapping[str, np.ndarray] | None, b: Mapping[str, np.ndarray] | None) -> Stats:
    """Return the name-by-name sum of two statistics; never modifies its arguments.

    ``None`` and ``{}`` are zeros.  Both sides must have the same names where both are non-empty.
    """
    if not a:
        return {k: np.array(v, copy=True) for k, v in (b or {}).items()}
    if not b:
        return {k: np.array(v, copy=True) for k, v in a.items()}
    if a.keys() != b.keys():
        raise ValueError(f"statistics must have the same names, but got {sorted(a)} and {sorted(b)}")
    return {k: np.asarray(a[k]) + np.asarray(b[k]) for k in a}


def sum_stats(parts: Iterable[Mapping[str, np.ndarray] | None]) -> Stats:
    """Sum any number of statistics (left to right)."""
    total: Stats = {}
    for part in parts:
        total = add_stats(total, part)
    return total
