"""Counter-based randomness keyed by (seed, sweep, item key, stream).

Every random number the library uses on items is a pure function of the run's ``seed``, the ``sweep``
(iteration) number, the item's stable 64-bit key and a ``stream`` number that separates independent draws
within one sweep (for example the label draw and the level draw of a Gibbs sweep).  Nothing depends on the
partition an item lands in, on the order items are visited, or on global state, so a result is the same on
any number of partitions and after any task retry.

Why not one ``numpy.random.Generator`` per item: creating ten million of them takes far longer than a whole
sweep over ten million items (BENCHMARKS.md, "Kernel and data-path choices").  Instead we apply a keyed
64-bit mixing function (the SplitMix64 finalizer, applied twice with independent keys) to the item keys,
vectorized over a whole block.  This is a counter-based generator in the sense of Salmon et al. (2011): the
(seed, sweep, stream) triple is the key, the item key is the counter.  Driver-side draws (Dirichlet
parameters) use numpy's ``Philox`` seeded from ``SeedSequence([seed, sweep, stream])``.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["driver_generator", "item_keys", "named_uniforms", "uniforms"]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MUL1 = np.uint64(0xBF58476D1CE4E5B9)
_MUL2 = np.uint64(0x94D049BB133111EB)
_MASK53 = np.uint64((1 << 53) - 1)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer, a bijection on uint64 with full avalanche, applied in place to ``x``."""
    shifted = x >> np.uint64(30)
    x ^= shifted
    x *= _MUL1
    np.right_shift(x, np.uint64(27), out=shifted)
    x ^= shifted
    x *= _MUL2
    np.right_shift(x, np.uint64(31), out=shifted)
    x ^= shifted
    return x


def _key(seed: int, sweep: int, stream: int) -> tuple[np.uint64, np.uint64]:
    return _digest_key(f"{seed}:{sweep}:{stream}")


def _digest_key(text: str) -> tuple[np.uint64, np.uint64]:
    """Two 64-bit keys from the BLAKE2 digest of ``text``."""
    digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
    return (np.uint64(int.from_bytes(digest[:8], "little")), np.uint64(int.from_bytes(digest[8:], "little")))


def uniforms(seed: int, sweep: int, keys: np.ndarray, stream: int = 0) -> np.ndarray:
    """Uniform draws in [0, 1), one per item key.

    Parameters
    ----------
    seed, sweep, stream : int
        The run's seed, the sweep number and an index separating independent draws within a sweep.
    keys : ndarray of uint64, shape (n_items,)
        Stable item keys (see :func:`item_keys`).

    Returns
    -------
    ndarray of float64, shape (n_items,)
    """
    return _keyed_uniforms(_key(seed, sweep, stream), keys)


def named_uniforms(name: str, seed: int, keys: np.ndarray) -> np.ndarray:
    """Uniform draws in [0, 1), one per item key, for a choice made once per item outside the fit.

    The draws are keyed by ``name`` and ``seed`` instead of a sweep and a stream, so they are independent of
    every draw of :func:`uniforms` (whose key is the digest of ``"seed:sweep:stream"``), also when the seeds
    are equal.  Used to split the gold into the part a fit uses and the part it is scored on
    (:class:`crowdspark.block.GoldSplit`).

    Parameters
    ----------
    name : str
        What the draws decide, e.g. ``"gold-split"``.
    seed : int
    keys : ndarray of uint64, shape (n_items,)
        Stable item keys (see :func:`item_keys`).

    Returns
    -------
    ndarray of float64, shape (n_items,)
    """
    return _keyed_uniforms(_digest_key(f"{name}/{seed}"), keys)


def _keyed_uniforms(key: tuple[np.uint64, np.uint64], keys: np.ndarray) -> np.ndarray:
    """The mixing of :func:`uniforms` under the 128-bit ``key``."""
    k1, k2 = key
    with np.errstate(over="ignore"):
        x = np.multiply(np.asarray(keys, dtype=np.uint64), _GOLDEN)  # a new array: _mix works in place
        x += k1
        _mix(x)
        x ^= k2
        _mix(x)
    x >>= np.uint64(11)
    out = x.astype(np.float64)
    out *= 1.0 / float(1 << 53)
    return out


def item_keys(item_ids: np.ndarray) -> np.ndarray:
    """Stable 64-bit keys of item ids.

    Ids are hashed as strings (``str(id)``) with pandas' SipHash-based ``hash_array`` and its fixed default
    key, which is deterministic across processes, machines and runs.

    Parameters
    ----------
    item_ids : array-like, shape (n_items,)

    Returns
    -------
    ndarray of uint64, shape (n_items,)
    """
    from pandas.util import hash_array

    values = np.asarray(item_ids, dtype=object)
    if values.size and not isinstance(values[0], str):
        values = np.array([str(v) for v in values], dtype=object)
    return hash_array(values, categorize=False)


def driver_generator(seed: int, sweep: int, stream: int = 0) -> np.random.Generator:
    """A generator for driver-side draws (global parameters) of one sweep."""
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([seed, sweep, stream])))
