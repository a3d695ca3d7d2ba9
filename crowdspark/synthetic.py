"""Synthetic crowd labels with planted parameters, in pandas and written in parallel by Spark.

Notation (as in the IDBLA paper): I items, K workers, C classes, H difficulty levels. ``T[i]`` true class,
``Q[i]`` difficulty level (0 = easiest), ``alpha`` (C,) class proportions, ``beta`` (H,) level proportions,
``pi[k, h, t, c]`` = P(worker k says c | true class t, level h). Dawid-Skene is the case H = 1.

Three generators share one chunk generator:

- :func:`dawid_skene_data` -- per-worker confusion matrices; each item gets ``labels_per_item`` distinct
  workers, drawn without replacement with per-worker participation weights (log-normal, so a few workers do
  much of the work, as in real crowds).
- :func:`idbla_data` -- the IDBLA model: items also have a level; a worker's matrix at level ``h`` is its
  base matrix mixed towards uniform with weight ``level_noise[h]`` (increasing with ``h``).
- :func:`mixed_crowd_data` -- a crowd of two kinds of workers (in one process only): a few prolific workers who
  label almost every item, with per-class accuracies (class-biased or not), and many sparse one-coin workers
  with a fixed number of labels each, spread so that each item gets a number of labels in a range.
- :func:`paper_synthetic` -- the paper's Synthetic set (section 5.1.4): each worker ``k`` labels each item
  independently with probability ``rho[k]``; parameters calibrated to the paper's reported statistics.

Conventions
-----------
- Item ids ``"i000123"`` (``"i"`` + the 0-based item number, zero-padded to at least 6 digits), worker ids
  ``"w0042"`` (at least 4 digits). Padding grows with the count so string order equals number order.
- Classes are the strings ``"0"`` .. ``"C-1"`` (class index ``c`` is ``str(c)``; the paper's classes 1..5
  are "0".."4"); ``truth`` uses the same strings; ``level`` is an int64 column, 0 = easiest.
- Items are generated in chunks of ``chunk_items`` consecutive items; chunk ``j`` draws from
  ``Philox(SeedSequence([seed, kind, 1, j, stream]))`` and the planted parameters from
  ``Philox(SeedSequence([seed, kind, 0]))``. The data therefore depend only on (seed, sizes, options,
  ``chunk_items``), never on Spark partitions, executors or the order chunks run in; the pandas functions
  and :func:`write_parquet` produce the same rows for the same arguments.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from crowdspark.errors import ConfigError
from crowdspark.io.files import HadoopFiles
from crowdspark.io.marker import DATASET, write_marker
from crowdspark.io.sink import check_replaceable
from crowdspark.validation import check_float, check_int

if TYPE_CHECKING:  # pragma: no cover
    from pyspark.sql import SparkSession

__all__ = [
    "CHUNK_ITEMS",
    "GENERATORS",
    "PAPER",
    "dawid_skene_data",
    "idbla_data",
    "mixed_crowd_data",
    "paper_synthetic",
    "write_parquet",
    "default_truth_path",
]

logger = logging.getLogger(__name__)

CHUNK_ITEMS = 50_000
"""Default number of items generated together (one random stream per chunk)."""

GENERATORS = ("ds", "idbla", "paper")
DS_ACCURACY = (0.5, 0.9)
IDBLA_ACCURACY = (0.6, 0.95)
_KIND_TAG = {"ds": 1, "idbla": 2, "paper": 3}
_STREAM_TRUTH, _STREAM_WORKERS, _STREAM_LABELS = 0, 1, 2
_MAX_REJECTION_ROUNDS = 64

# The paper's Synthetic set (section 5.1.4) and the generator settings calibrated to reproduce it.
PAPER: Mapping[str, Any] = MappingProxyType({
    "n_items": 1000,
    "n_workers": 100,
    "class_proportions": (0.18, 0.27, 0.45, 0.05, 0.05),
    "rho_max": 0.74,
    "rho_range": (0.03, 0.2),
    "n_labels": 11615,
    "mean_accuracy": 0.4192,
    "best_accuracy": 0.8349,
    # calibration (see docs/synthetic.md)
    "level_proportions": (0.75, 0.25),
    "level_noise": (0.0, 0.6),
    "accuracy_beta": (4.0, 4.75),
    "best_base_accuracy": 0.947,
    "off_diagonal_concentration": 1.0,
})

LabelsTruthParams = tuple[pd.DataFrame, pd.DataFrame, dict[str, np.ndarray]]


# ----------------------------------------------------------------------------------------------------------
# specification of a dataset: sizes + planted parameters (small, built on the driver)


@dataclass(frozen=True)
class _Spec:
    """Everything a chunk needs: sizes, planted parameters and how workers are assigned.

    ``labels_per_item`` is None for Bernoulli participation (``params["rho"]``), else the number of distinct
    workers per item drawn with ``params["weights"]``.
    """

    kind: str
    n_items: int
    n_workers: int
    n_classes: int
    labels_per_item: int | None
    seed: int
    chunk_items: int
    params: dict[str, np.ndarray]
    with_level: bool

    @property
    def n_chunks(self) -> int:
        return max(1, math.ceil(self.n_items / self.chunk_items))


def _generator(seed: int, *words: int) -> np.random.Generator:
    return np.random.Generator(np.random.Philox(np.random.SeedSequence([seed, *words])))


def _check_range(name: str, value: Sequence[float], low: float = 0.0, high: float = 1.0) -> tuple[float, float]:
    if not isinstance(value, (tuple, list, np.ndarray)) or len(value) != 2:
        raise ConfigError(f"{name} must be a pair (low, high), but got {value!r}")
    lo = check_float(f"{name}[0]", value[0], minimum=low, maximum=high)
    hi = check_float(f"{name}[1]", value[1], minimum=lo, maximum=high)
    return lo, hi


def _check_proportions(name: str, value: Sequence[float] | None, size: int) -> np.ndarray:
    """Validated proportions of shape (size,), uniform when ``value`` is None."""
    if value is None:
        return np.full(size, 1.0 / size)
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (size,) or not np.all(np.isfinite(arr)) or np.any(arr < 0) or arr.sum() <= 0:
        raise ConfigError(f"{name} must be {size} non-negative numbers with a positive sum, but got {value!r}")
    return arr / arr.sum()


def _confusions(
    rng: np.random.Generator, n_workers: int, n_classes: int, diagonal: np.ndarray, concentration: float
) -> np.ndarray:
    """Confusion matrices with given diagonals and Dirichlet-distributed off-diagonal mass.

    Parameters
    ----------
    diagonal : ndarray, shape (K, C)
        ``pi[k, t, t]``.
    concentration : float
        Dirichlet concentration of the off-diagonal mass of each row (small = strongly biased workers).

    Returns
    -------
    ndarray of float64, shape (K, C, C); rows sum to 1.
    """
    c = n_classes
    off = rng.gamma(concentration, size=(n_workers, c, c - 1))
    off /= off.sum(axis=2, keepdims=True)
    off *= (1.0 - diagonal)[:, :, None]
    pi = np.empty((n_workers, c, c))
    rows = np.arange(c)
    off_cols = np.array([[j for j in range(c) if j != t] for t in range(c)])  # (C, C-1)
    pi[:, rows[:, None], off_cols] = off
    pi[:, rows, rows] = diagonal
    return pi


def _level_mix(base: np.ndarray, level_noise: np.ndarray) -> np.ndarray:
    """Per-level matrices ``(1 - d_h) base + d_h / C``: (K, C, C), (H,) -> (K, H, C, C)."""
    c = base.shape[-1]
    d = level_noise[None, :, None, None]
    return (1.0 - d) * base[:, None] + d / c


def _check_level_noise(value: Sequence[float] | None, n_levels: int) -> np.ndarray:
    """(H,) mixing weights towards uniform; default ``linspace(0, 0.7, H)`` (0 for H = 1)."""
    if value is None:
        return np.linspace(0.0, 0.7, n_levels) if n_levels > 1 else np.zeros(1)
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != (n_levels,) or np.any(~np.isfinite(arr)) or np.any(arr < 0) or np.any(arr > 1):
        raise ConfigError(f"level_noise must be {n_levels} numbers in [0, 1], but got {value!r}")
    if np.any(np.diff(arr) < 0):
        raise ConfigError(f"level_noise must be non-decreasing (level 0 is the easiest), but got {value!r}")
    return arr


def _check_sizes(n_items: Any, n_workers: Any, n_classes: Any, labels_per_item: Any) -> tuple[int, int, int, int]:
    n_items = check_int("n_items", n_items, minimum=1)
    n_workers = check_int("n_workers", n_workers, minimum=1)
    n_classes = check_int("n_classes", n_classes, minimum=2)
    labels_per_item = check_int("labels_per_item", labels_per_item, minimum=1, maximum=n_workers)
    return n_items, n_workers, n_classes, labels_per_item


def _model_spec(
    kind: str,
    n_items: Any,
    n_workers: Any,
    n_classes: Any,
    n_levels: Any,
    labels_per_item: Any,
    seed: Any,
    *,
    accuracy: Sequence[float],
    class_proportions: Sequence[float] | None,
    level_proportions: Sequence[float] | None,
    level_noise: Sequence[float] | None,
    activity_sigma: float,
    off_diagonal_concentration: float,
    chunk_items: int,
) -> _Spec:
    """Validate arguments and draw the planted parameters of the "ds" / "idbla" generators."""
    n_items, n_workers, n_classes, labels_per_item = _check_sizes(n_items, n_workers, n_classes, labels_per_item)
    n_levels = check_int("n_levels", n_levels, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    chunk_items = check_int("chunk_items", chunk_items, minimum=1)
    low, high = _check_range("accuracy", accuracy)
    activity_sigma = check_float("activity_sigma", activity_sigma, minimum=0.0)
    concentration = check_float(
        "off_diagonal_concentration", off_diagonal_concentration, minimum=0.0, strict_min=True
    )
    alpha = _check_proportions("class_proportions", class_proportions, n_classes)
    beta = _check_proportions("level_proportions", level_proportions, n_levels)
    noise = _check_level_noise(level_noise, n_levels)

    rng = _generator(seed, _KIND_TAG[kind], 0)
    diagonal = rng.uniform(low, high, size=(n_workers, n_classes))
    base = _confusions(rng, n_workers, n_classes, diagonal, concentration)
    weights = rng.lognormal(0.0, activity_sigma, size=n_workers)
    params = {
        "alpha": alpha,
        "beta": beta,
        "pi": _level_mix(base, noise),
        "weights": weights / weights.sum(),
        "level_noise": noise,
    }
    return _Spec(kind, n_items, n_workers, n_classes, labels_per_item, seed, chunk_items, params, kind != "ds")


def _paper_rho(rng: np.random.Generator, n_workers: int) -> np.ndarray:
    """Participation probabilities: one worker at ``rho_max``, the rest in ``rho_range`` with a mean that
    makes the expected number of labels ``PAPER["n_labels"]``; shape (K,)."""
    lo, hi = PAPER["rho_range"]
    target_rest = (PAPER["n_labels"] / PAPER["n_items"] - PAPER["rho_max"]) / (n_workers - 1)
    z = rng.beta(1.2, 1.2, size=n_workers - 1)
    z *= (target_rest - lo) / ((hi - lo) * z.mean())  # exact mean, a few may exceed hi ("most" in range)
    rest = np.minimum(lo + (hi - lo) * z, PAPER["rho_max"])
    top = int(rng.integers(n_workers))
    return np.insert(rest, top, PAPER["rho_max"])


def _paper_spec(seed: Any, chunk_items: int) -> _Spec:
    """Planted parameters of the paper's Synthetic set (calibration in ``PAPER``)."""
    seed = check_int("seed", seed, minimum=0)
    chunk_items = check_int("chunk_items", chunk_items, minimum=1)
    n_workers, c = PAPER["n_workers"], len(PAPER["class_proportions"])
    rng = _generator(seed, _KIND_TAG["paper"], 0)
    rho = _paper_rho(rng, n_workers)
    base_accuracy = rng.beta(*PAPER["accuracy_beta"], size=n_workers)
    base_accuracy[np.argmax(rho)] = PAPER["best_base_accuracy"]
    diagonal = np.repeat(base_accuracy[:, None], c, axis=1)
    base = _confusions(rng, n_workers, c, diagonal, PAPER["off_diagonal_concentration"])
    noise = np.asarray(PAPER["level_noise"], dtype=np.float64)
    params = {
        "alpha": np.asarray(PAPER["class_proportions"], dtype=np.float64),
        "beta": np.asarray(PAPER["level_proportions"], dtype=np.float64),
        "pi": _level_mix(base, noise),
        "rho": rho,
        "level_noise": noise,
    }
    return _Spec("paper", PAPER["n_items"], n_workers, c, None, seed, chunk_items, params, True)


# ----------------------------------------------------------------------------------------------------------
# the chunk generator, shared by the pandas functions and the Spark writer


def _categorical(rng: np.random.Generator, cumulative: np.ndarray, size: int) -> np.ndarray:
    """Draws from a categorical distribution given its cumulative probabilities (last = 1)."""
    return np.minimum(np.searchsorted(cumulative, rng.random(size), side="right"), cumulative.shape[0] - 1)


def _chunk_bounds(spec: _Spec, chunk: int) -> tuple[int, int]:
    start = chunk * spec.chunk_items
    return start, min(start + spec.chunk_items, spec.n_items)


def _chunk_truth(spec: _Spec, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """True classes and levels of the chunk's items, each int64 of shape (n,)."""
    start, stop = _chunk_bounds(spec, chunk)
    rng = _generator(spec.seed, _KIND_TAG[spec.kind], 1, chunk, _STREAM_TRUTH)
    truth = _categorical(rng, np.cumsum(spec.params["alpha"]), stop - start)
    level = _categorical(rng, np.cumsum(spec.params["beta"]), stop - start)
    return truth, level


def _distinct_workers(rng: np.random.Generator, weights: np.ndarray, n: int, r: int) -> np.ndarray:
    """``r`` distinct workers per item, drawn one after another with probability proportional to
    ``weights`` among those not yet drawn (successive sampling without replacement).

    Each position is drawn for all items at once and redrawn where it repeats an earlier position, which is
    exactly sampling from the renormalized remaining weights. Rows still colliding after
    ``_MAX_REJECTION_ROUNDS`` rounds (only when r is close to K) are drawn one by one.

    Returns
    -------
    ndarray of int64, shape (n, r)
    """
    cumulative = np.cumsum(weights)
    cumulative /= cumulative[-1]
    chosen = np.empty((n, r), dtype=np.int64)
    for j in range(r):
        rows = np.arange(n)
        for _ in range(_MAX_REJECTION_ROUNDS):
            chosen[rows, j] = _categorical(rng, cumulative, rows.shape[0])
            if j == 0:
                break
            rows = rows[(chosen[rows, :j] == chosen[rows, j : j + 1]).any(axis=1)]
            if rows.size == 0:
                break
        else:
            for row in rows:
                remaining = weights.copy()
                remaining[chosen[row, :j]] = 0.0
                chosen[row, j] = rng.choice(weights.shape[0], p=remaining / remaining.sum())
    return chosen


def _chunk_assignments(spec: _Spec, chunk: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(local item index, worker) of every label of the chunk, item-major; int64 arrays of shape (m,)."""
    rng = _generator(spec.seed, _KIND_TAG[spec.kind], 1, chunk, _STREAM_WORKERS)
    if spec.labels_per_item is None:
        mask = rng.random((n, spec.n_workers)) < spec.params["rho"]
        item, worker = np.nonzero(mask)
        return item.astype(np.int64), worker.astype(np.int64)
    r = spec.labels_per_item
    worker = _distinct_workers(rng, spec.params["weights"], n, r).ravel()
    return np.repeat(np.arange(n, dtype=np.int64), r), worker


def _draw_labels(
    rng: np.random.Generator, cumulative_pi: np.ndarray, worker: np.ndarray, level: np.ndarray, truth: np.ndarray
) -> np.ndarray:
    """Labels ``c ~ pi[worker, level, truth, :]`` given cumulative rows of shape (K, H, C, C); int64 (m,)."""
    _, h, c, _ = cumulative_pi.shape
    rows = cumulative_pi.reshape(-1, c)[(worker * h + level) * c + truth]  # (m, C)
    u = rng.random(worker.shape[0])
    return np.minimum((u[:, None] >= rows[:, :-1]).sum(axis=1), c - 1)


def _cumulative_pi(pi: np.ndarray) -> np.ndarray:
    out = np.cumsum(pi, axis=-1)
    out[..., -1] = 1.0
    return out


def _chunk_codes(spec: _Spec, chunk: int, cumulative_pi: np.ndarray) -> dict[str, np.ndarray]:
    """Integer codes of one chunk.

    Returns
    -------
    dict with ``item`` (m,) global item numbers, ``worker`` (m,), ``label`` (m,) class indices, and the
    per-item ``truth_item`` (n,) global item numbers, ``truth`` (n,), ``level`` (n,); all int64.
    """
    start, stop = _chunk_bounds(spec, chunk)
    truth, level = _chunk_truth(spec, chunk)
    local, worker = _chunk_assignments(spec, chunk, stop - start)
    rng = _generator(spec.seed, _KIND_TAG[spec.kind], 1, chunk, _STREAM_LABELS)
    label = _draw_labels(rng, cumulative_pi, worker, level[local], truth[local])
    return {
        "item": local + start,
        "worker": worker,
        "label": label,
        "truth_item": np.arange(start, stop, dtype=np.int64),
        "truth": truth,
        "level": level,
    }


# ----------------------------------------------------------------------------------------------------------
# ids and Arrow tables


def _id_width(count: int, minimum: int) -> int:
    return max(minimum, len(str(max(count - 1, 0))))


def _format_ids(prefix: str, numbers: np.ndarray, width: int) -> pa.StringArray:
    """``prefix + zero-padded number`` for each number, built directly as Arrow string buffers."""
    n = numbers.shape[0]
    size = len(prefix) + width
    buf = np.empty((n, size), dtype=np.uint8)
    buf[:, : len(prefix)] = np.frombuffer(prefix.encode(), dtype=np.uint8)
    rest = np.asarray(numbers, dtype=np.int64).copy()
    for pos in range(size - 1, len(prefix) - 1, -1):
        buf[:, pos] = 48 + rest % 10
        rest //= 10
    offsets = np.arange(0, (n + 1) * size, size, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(buf.ravel()))


def _class_names(n_classes: int) -> pa.StringArray:
    return pa.array([str(c) for c in range(n_classes)], type=pa.string())


def class_names(n_classes: int) -> list[str]:
    """The class strings used for ``n_classes`` classes (index c -> name)."""
    return _class_names(n_classes).to_pylist()


def _take(names: pa.Array, codes: np.ndarray) -> pa.Array:
    return names.take(pa.array(codes, type=pa.int64()))


LABEL_SCHEMA = pa.schema([("item", pa.string()), ("worker", pa.string()), ("label", pa.string())])


def _truth_schema(with_level: bool) -> pa.Schema:
    fields = [("item", pa.string()), ("truth", pa.string())]
    return pa.schema(fields + [("level", pa.int64())] if with_level else fields)


@dataclass(frozen=True)
class _Names:
    """Per-dataset string tables, built once per process."""

    item_width: int
    workers: pa.Array
    classes: pa.Array

    @classmethod
    def of(cls, spec: _Spec) -> _Names:
        return cls(
            _id_width(spec.n_items, 6),
            _format_ids("w", np.arange(spec.n_workers), _id_width(spec.n_workers, 4)),
            _class_names(spec.n_classes),
        )


def _labels_table(codes: dict[str, np.ndarray], names: _Names) -> pa.Table:
    return pa.table(
        [
            _format_ids("i", codes["item"], names.item_width),
            _take(names.workers, codes["worker"]),
            _take(names.classes, codes["label"]),
        ],
        schema=LABEL_SCHEMA,
    )


def _truth_table(spec: _Spec, chunk: int, names: _Names, truth: np.ndarray, level: np.ndarray) -> pa.Table:
    start, stop = _chunk_bounds(spec, chunk)
    columns = [_format_ids("i", np.arange(start, stop), names.item_width), _take(names.classes, truth)]
    if spec.with_level:
        columns.append(pa.array(level, type=pa.int64()))
    return pa.table(columns, schema=_truth_schema(spec.with_level))


# ----------------------------------------------------------------------------------------------------------
# pandas faces


def _planted(spec: _Spec) -> dict[str, np.ndarray]:
    """The planted parameters as returned to users (copies; DS ``pi`` without the level axis)."""
    out = {k: np.array(v, copy=True) for k, v in spec.params.items()}
    if not spec.with_level:
        out["pi"] = out["pi"][:, 0]
        out.pop("beta")
        out.pop("level_noise")
    return out


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    frame = table.to_pandas()
    for name in frame.columns:
        if frame[name].dtype != object and pa.types.is_string(table.schema.field(name).type):
            frame[name] = frame[name].astype(object)
    return frame


def _generate(spec: _Spec) -> LabelsTruthParams:
    """Run every chunk of ``spec`` in this process and assemble the pandas outputs."""
    cumulative_pi = _cumulative_pi(spec.params["pi"])
    names = _Names.of(spec)
    label_tables, truth_tables = [], []
    for chunk in range(spec.n_chunks):
        codes = _chunk_codes(spec, chunk, cumulative_pi)
        label_tables.append(_labels_table(codes, names))
        truth_tables.append(_truth_table(spec, chunk, names, codes["truth"], codes["level"]))
    labels = _to_pandas(pa.concat_tables(label_tables))
    truth = _to_pandas(pa.concat_tables(truth_tables))
    logger.info("generated %s: %d labels, %d items, %d workers", spec.kind, len(labels), spec.n_items,
                spec.n_workers)  # fmt: skip
    return labels, truth, _planted(spec)


def dawid_skene_data(
    n_items: int,
    n_workers: int,
    n_classes: int,
    labels_per_item: int,
    seed: int,
    *,
    accuracy: tuple[float, float] = DS_ACCURACY,
    class_proportions: Sequence[float] | None = None,
    activity_sigma: float = 1.0,
    off_diagonal_concentration: float = 1.0,
    chunk_items: int = CHUNK_ITEMS,
) -> LabelsTruthParams:
    """Labels from the Dawid-Skene model with planted per-worker confusion matrices.

    Parameters
    ----------
    n_items, n_workers, n_classes : int
        I, K and C (C >= 2).
    labels_per_item : int
        Number of distinct workers labelling each item (1 <= r <= K).
    seed : int
        Non-negative seed; the same arguments and seed give the same data.
    accuracy : (float, float)
        Range of the diagonal entries: ``pi[k, t, t] ~ Uniform(low, high)`` independently per worker and class.
    class_proportions : sequence of float, shape (C,), optional
        ``alpha`` (normalized); uniform when omitted.
    activity_sigma : float
        Worker participation weights are ``LogNormal(0, activity_sigma)`` (normalized); 0 gives equal weights.
        Each item's workers are drawn without replacement with these weights.
    off_diagonal_concentration : float
        The error mass ``1 - pi[k, t, t]`` is split over the other classes by ``Dirichlet(concentration)``;
        small values give strongly biased workers.
    chunk_items : int
        Items per random-stream chunk; part of the data's identity (keep the default to match Spark output).

    Returns
    -------
    labels : DataFrame, shape (I * r, 3)
        String columns ``item``, ``worker``, ``label``, ordered by item.
    truth : DataFrame, shape (I, 2)
        ``item``, ``truth`` (class strings).
    params : dict
        ``alpha`` (C,), ``pi`` (K, C, C), ``weights`` (K,) participation weights (sum 1).
    """
    spec = _model_spec(
        "ds", n_items, n_workers, n_classes, 1, labels_per_item, seed,
        accuracy=accuracy, class_proportions=class_proportions, level_proportions=None, level_noise=None,
        activity_sigma=activity_sigma, off_diagonal_concentration=off_diagonal_concentration,
        chunk_items=chunk_items,
    )  # fmt: skip
    return _generate(spec)


def idbla_data(
    n_items: int,
    n_workers: int,
    n_classes: int,
    n_levels: int,
    labels_per_item: int,
    seed: int,
    *,
    accuracy: tuple[float, float] = IDBLA_ACCURACY,
    class_proportions: Sequence[float] | None = None,
    level_proportions: Sequence[float] | None = None,
    level_noise: Sequence[float] | None = None,
    activity_sigma: float = 1.0,
    off_diagonal_concentration: float = 1.0,
    chunk_items: int = CHUNK_ITEMS,
) -> LabelsTruthParams:
    """Labels from the IDBLA model with planted difficulty levels.

    Each item has a true class ``T ~ alpha`` and a level ``Q ~ beta`` (0 = easiest). Worker ``k`` has a base
    confusion matrix ``B[k]`` drawn as in :func:`dawid_skene_data`; at level ``h`` it labels with
    ``pi[k, h] = (1 - level_noise[h]) * B[k] + level_noise[h] / C`` (harder levels are closer to uniform).

    Parameters
    ----------
    n_items, n_workers, n_classes, n_levels : int
        I, K, C (>= 2) and H (>= 1).
    labels_per_item, seed, accuracy, class_proportions, activity_sigma, off_diagonal_concentration, chunk_items
        As in :func:`dawid_skene_data` (``accuracy`` is the range of the base diagonals).
    level_proportions : sequence of float, shape (H,), optional
        ``beta``; uniform when omitted.
    level_noise : sequence of float, shape (H,), optional
        Non-decreasing weights in [0, 1]; default ``linspace(0, 0.7, H)``.

    Returns
    -------
    labels : DataFrame, shape (I * r, 3)
        String columns ``item``, ``worker``, ``label``.
    truth : DataFrame, shape (I, 3)
        ``item``, ``truth`` (class string), ``level`` (int64).
    params : dict
        ``alpha`` (C,), ``beta`` (H,), ``pi`` (K, H, C, C), ``weights`` (K,), ``level_noise`` (H,).
    """
    spec = _model_spec(
        "idbla", n_items, n_workers, n_classes, n_levels, labels_per_item, seed,
        accuracy=accuracy, class_proportions=class_proportions, level_proportions=level_proportions,
        level_noise=level_noise, activity_sigma=activity_sigma,
        off_diagonal_concentration=off_diagonal_concentration, chunk_items=chunk_items,
    )  # fmt: skip
    return _generate(spec)


def paper_synthetic(seed: int = 0) -> LabelsTruthParams:
    """The paper's Synthetic set (section 5.1.4), regenerated from its description.

    1000 items, 100 workers, 5 classes with ``alpha = (0.18, 0.27, 0.45, 0.05, 0.05)``; worker ``k`` labels
    each item independently with probability ``rho[k]`` (one worker at 0.74, the others mostly in
    [0.03, 0.2], 11615 labels in expectation); two difficulty levels (75% easy, 25% hard; the hard level
    mixes each worker's matrix 60% towards uniform). Worker base accuracies are ``Beta(4, 4.75)`` and the
    most active worker's is 0.947, calibrated so that the mean worker accuracy is about 42% and the best
    about 83%, as in the paper (see ``docs/synthetic.md`` for the realized statistics).

    Parameters
    ----------
    seed : int
        Non-negative seed.

    Returns
    -------
    labels : DataFrame
        String columns ``item``, ``worker``, ``label`` (classes ``"0"`` .. ``"4"`` for the paper's 1..5).
    truth : DataFrame, shape (1000, 3)
        ``item``, ``truth``, ``level`` (0 easy, 1 hard).
    params : dict
        ``alpha`` (5,), ``beta`` (2,), ``pi`` (100, 2, 5, 5), ``rho`` (100,), ``level_noise`` (2,).
    """
    return _generate(_paper_spec(seed, CHUNK_ITEMS))


_KIND_MIXED = 4


def mixed_crowd_data(
    n_items: int,
    class_proportions: Sequence[float],
    seed: int,
    *,
    n_prolific: int = 3,
    coverage: float = 0.97,
    prolific_accuracy: tuple[float, float] = (0.65, 0.85),
    class_biased: bool = True,
    sparse_labels_per_item: tuple[int, int] = (2, 8),
    labels_per_sparse_worker: int = 15,
    sparse_accuracy: tuple[float, float] = (0.55, 0.95),
    sparse_class_shift: Sequence[float] | None = None,
    sparse_class_bias: float = 0.0,
    activity_sigma: float = 0.0,
    hard_share: float = 0.0,
    hard_drop: float = 0.4,
    hard_errors: str = "uniform",
    ordinal_errors: float = 0.0,
) -> LabelsTruthParams:
    """A crowd of a few prolific workers and many sparse one-coin workers.

    Each prolific worker labels each item independently with probability ``coverage``; its confusion matrix
    has the diagonal ``pi[k, t, t] ~ Uniform(prolific_accuracy)`` drawn per class (``class_biased``) or once
    per worker, errors spread uniformly over the other classes.  Each item also gets
    ``Uniform{sparse_labels_per_item}`` labels from sparse workers: the item's slots are shuffled and dealt to
    workers ``labels_per_sparse_worker`` at a time (a slot that would repeat a worker on an item is dropped),
    so the number of sparse workers follows from the slots.  A sparse worker is one-coin: right with
    probability ``a ~ Uniform(sparse_accuracy)``, else any other class alike; with ``sparse_class_shift``
    ``delta`` (C,), right on class t with probability ``a + delta[t]`` (clipped to [0.02, 0.99]): every
    sparse worker shares the same asymmetry between classes.

    Four departures from that crowd, each off by default (the data are then those of the arguments above):

    - ``sparse_class_bias`` ``b > 0``: every sparse worker is biased towards classes of its own, right on class
      t with probability ``a + e[k, t]``, ``e[k] ~ Normal(0, b)`` per class, centred over the classes (clipped
      to [0.02, 0.99]);
    - ``activity_sigma`` ``s > 0``: the slots are dealt in runs of log-normal length, ``round(n exp(s z))``
      slots (at least 1) with ``n = labels_per_sparse_worker`` and ``z ~ Normal(0, 1)`` per worker, so a few
      sparse workers give hundreds of labels and most give a handful;
    - ``hard_share`` ``h > 0``: each item is hard with probability h; on a hard item every worker is right with
      probability ``pi[k, t, t] - hard_drop`` (at least 0.02), and the mass taken from the right label goes to
      the other classes alike (``hard_errors = "uniform"``) or, on items whose true class is not the most
      frequent, to the most frequent class (``"majority"``: hard items of rare classes look common).  The
      workers' errors are then correlated through the items, which no confusion-matrix model says;
    - ``ordinal_errors`` ``d > 0``: the classes are ordered grades, and every worker's errors on class t go to
      class c with probability proportional to ``exp(-d |c - t|)`` instead of alike: a pattern of errors the
      whole crowd shares (neighbouring grades are confused most).

    Parameters
    ----------
    n_items : int
    class_proportions : sequence of float, shape (C,)
        ``alpha`` (normalized); C >= 2.
    seed : int
        Non-negative; the same arguments and seed give the same data.
    n_prolific : int
    coverage : float
    prolific_accuracy, sparse_accuracy : (float, float)
    sparse_class_shift : sequence of float, shape (C,), optional
    class_biased : bool
    sparse_labels_per_item : (int, int)
        Inclusive range of each item's sparse labels.
    labels_per_sparse_worker : int
    sparse_class_bias, activity_sigma, ordinal_errors : float
        Non-negative.
    hard_share, hard_drop : float
        In [0, 1].
    hard_errors : {"uniform", "majority"}

    Returns
    -------
    labels : DataFrame
        String columns ``item``, ``worker``, ``label``, ordered by item; prolific workers are the first ids.
    truth : DataFrame, shape (I, 2)
        ``item``, ``truth``.
    params : dict
        ``alpha`` (C,), ``pi`` (K, C, C) and ``hard`` (I,), bool.
    """
    n_items = check_int("n_items", n_items, minimum=1)
    seed = check_int("seed", seed, minimum=0)
    n_prolific = check_int("n_prolific", n_prolific, minimum=0)
    per_worker = check_int("labels_per_sparse_worker", labels_per_sparse_worker, minimum=1)
    coverage = check_float("coverage", coverage, minimum=0.0, maximum=1.0)
    bias = check_float("sparse_class_bias", sparse_class_bias, minimum=0.0)
    sigma = check_float("activity_sigma", activity_sigma, minimum=0.0)
    ordinal = check_float("ordinal_errors", ordinal_errors, minimum=0.0)
    hard_share = check_float("hard_share", hard_share, minimum=0.0, maximum=1.0)
    hard_drop = check_float("hard_drop", hard_drop, minimum=0.0, maximum=1.0)
    if hard_errors not in ("uniform", "majority"):
        raise ConfigError(f"hard_errors must be 'uniform' or 'majority', but got {hard_errors!r}")
    alpha = _check_proportions("class_proportions", class_proportions, len(class_proportions))
    c = alpha.size
    low, high = sorted(int(v) for v in sparse_labels_per_item)
    rng = _generator(seed, _KIND_MIXED)
    departures = _generator(seed, _KIND_MIXED, 1)  # draws of the departures only: the rest stays as it was
    truth = _categorical(rng, np.cumsum(alpha), n_items)
    diag_size = (n_prolific, c) if class_biased else (n_prolific, 1)
    prolific_diag = np.broadcast_to(rng.uniform(*_check_range("prolific_accuracy", prolific_accuracy), diag_size),
                                    (n_prolific, c))
    p_items = [np.flatnonzero(rng.random(n_items) < coverage) for _ in range(n_prolific)]
    slots = np.repeat(np.arange(n_items), rng.integers(low, high + 1, n_items))
    slots = slots[rng.permutation(slots.size)]
    owner = _slot_owners(departures, slots.size, per_worker, sigma)
    n_sparse = int(owner[-1]) + 1 if owner.size else 0
    pairs = pd.DataFrame({"item": np.concatenate([*p_items, slots]),
                          "worker": np.concatenate([np.full(len(x), k) for k, x in enumerate(p_items)]
                                                   + [n_prolific + owner]).astype(np.int64)})
    pairs = pairs.drop_duplicates().sort_values(["item", "worker"], kind="stable").reset_index(drop=True)
    diag = np.concatenate([prolific_diag,
                           np.repeat(rng.uniform(*_check_range("sparse_accuracy", sparse_accuracy), (n_sparse, 1)),
                                     c, axis=1)])
    if sparse_class_shift is not None:
        shift = np.asarray(sparse_class_shift, dtype=np.float64)
        if shift.shape != (c,) or not np.all(np.isfinite(shift)):
            raise ConfigError(f"sparse_class_shift must be {c} finite numbers, but got {sparse_class_shift!r}")
        diag[n_prolific:] = np.clip(diag[n_prolific:] + shift, 0.02, 0.99)
    if bias > 0.0:
        deviation = departures.normal(0.0, bias, (n_sparse, c))
        diag[n_prolific:] = np.clip(diag[n_prolific:] + deviation - deviation.mean(axis=1, keepdims=True), 0.02, 0.99)
    pi = _confusion_from_diagonal(diag, ordinal)
    item, worker = pairs["item"].to_numpy(), pairs["worker"].to_numpy()
    hard = departures.random(n_items) < hard_share if hard_share > 0.0 else np.zeros(n_items, dtype=bool)
    rows = _hard_rows(pi[worker, truth[item]], truth[item], hard[item], hard_drop,
                      int(np.argmax(alpha)) if hard_errors == "majority" else None)
    labels = _categorical_rows(rng, np.cumsum(rows, axis=1))
    n_workers = n_prolific + n_sparse
    item_names = np.array([f"i{i:0{_id_width(n_items, 6)}d}" for i in range(n_items)], dtype=object)
    worker_names = np.array([f"w{k:0{_id_width(n_workers, 4)}d}" for k in range(n_workers)], dtype=object)
    classes = np.array(class_names(c), dtype=object)
    labels_frame = pd.DataFrame({"item": item_names[item], "worker": worker_names[worker], "label": classes[labels]})
    truth_frame = pd.DataFrame({"item": item_names, "truth": classes[truth]})
    logger.info("generated mixed crowd: %d labels, %d items, %d workers", len(labels_frame), n_items, n_workers)
    return labels_frame, truth_frame, {"alpha": alpha, "pi": pi, "hard": hard}


def _confusion_from_diagonal(diag: np.ndarray, ordinal: float) -> np.ndarray:
    """Confusion matrices (K, C, C) with the diagonal ``diag`` (K, C) and each row's errors spread alike, or
    with ``ordinal > 0`` in proportion to ``exp(-ordinal |c - t|)``."""
    c = diag.shape[1]
    if ordinal == 0.0:
        off = (1.0 - diag) / (c - 1)
        pi = np.repeat(off[:, :, None], c, axis=2)
    else:
        grades = np.arange(c)
        weights = np.exp(-ordinal * np.abs(grades[:, None] - grades[None, :]))
        np.fill_diagonal(weights, 0.0)
        pi = (1.0 - diag)[:, :, None] * (weights / weights.sum(axis=1, keepdims=True))[None]
    pi[:, np.arange(c), np.arange(c)] = diag
    return pi


def _slot_owners(rng: np.random.Generator, n_slots: int, per_worker: int, sigma: float) -> np.ndarray:
    """The sparse worker (0, 1, ...) each of ``n_slots`` shuffled slots is dealt to, int64 (n_slots,): runs of
    ``per_worker`` slots, or of log-normal length (median ``per_worker``, at least 1) when ``sigma > 0``."""
    if sigma == 0.0:
        return np.arange(n_slots, dtype=np.int64) // per_worker
    lengths = np.maximum(1, np.round(per_worker * rng.lognormal(0.0, sigma, max(n_slots, 1)))).astype(np.int64)
    return np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)[:n_slots]


def _hard_rows(rows: np.ndarray, true_class: np.ndarray, hard: np.ndarray, drop: float,
               majority: int | None) -> np.ndarray:
    """Each label's class probabilities (m, C) with the hard items' right label ``drop`` less likely.

    Parameters
    ----------
    rows : ndarray, shape (m, C)
        ``pi[worker, truth]`` of every label.
    true_class : ndarray of int, shape (m,)
    hard : ndarray of bool, shape (m,)
        Whether the label's item is hard.
    drop : float
    majority : int or None
        The class that takes the mass on hard items of the other classes, or None to spread it evenly.

    Returns
    -------
    ndarray, shape (m, C)
    """
    if not hard.any():
        return rows
    out = rows.copy()
    at = np.flatnonzero(hard)
    right = out[at, true_class[at]]
    moved = right - np.maximum(right - drop, 0.02).clip(max=right)
    out[at, true_class[at]] -= moved
    c = out.shape[1]
    if majority is None:
        spread = np.ones(at.size, dtype=bool)
    else:
        spread = true_class[at] == majority
        out[at[~spread], majority] += moved[~spread]
    others = np.ones((spread.sum(), c)) / (c - 1)
    others[np.arange(others.shape[0]), true_class[at[spread]]] = 0.0
    out[at[spread]] += moved[spread, None] * others
    return out


def _categorical_rows(rng: np.random.Generator, cumulative: np.ndarray) -> np.ndarray:
    """One draw per row of ``cumulative`` (m, C), the rows' cumulative probabilities, int64 (m,)."""
    u = rng.random(cumulative.shape[0])[:, None]
    return np.minimum((u >= cumulative).sum(axis=1), cumulative.shape[1] - 1)


# ----------------------------------------------------------------------------------------------------------
# Spark writer


def default_truth_path(path: str) -> str:
    """Where :func:`write_parquet` writes the truth by default: ``path`` + ``"_truth"``."""
    return path.rstrip("/") + "_truth"


def _spec_for(
    generator: str,
    n_items: int | None,
    n_workers: int | None,
    n_classes: int | None,
    labels_per_item: int | None,
    seed: int,
    n_levels: int | None,
    chunk_items: int,
    options: dict[str, Any],
) -> _Spec:
    if generator not in GENERATORS:
        raise ConfigError(f"generator must be one of {list(GENERATORS)}, but got {generator!r}")
    if generator == "paper":
        given = {"n_items": n_items, "n_workers": n_workers, "n_classes": n_classes,
                 "labels_per_item": labels_per_item, "n_levels": n_levels, **options}  # fmt: skip
        extra = sorted(k for k, v in given.items() if v is not None)
        if extra:
            raise ConfigError(f"generator 'paper' has fixed sizes and options, but got {extra}")
        return _paper_spec(seed, chunk_items)
    defaults = {"accuracy": DS_ACCURACY if generator == "ds" else IDBLA_ACCURACY, "class_proportions": None,
                "level_proportions": None, "level_noise": None, "activity_sigma": 1.0,
                "off_diagonal_concentration": 1.0}  # fmt: skip
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise ConfigError(f"options must be among {sorted(defaults)}, but got {unknown}")
    if generator == "ds" and n_levels not in (None, 1):
        raise ConfigError(f"n_levels must be 1 (or omitted) for generator 'ds', but got {n_levels!r}")
    levels = 1 if generator == "ds" else (2 if n_levels is None else n_levels)
    kwargs = {**defaults, **options}
    return _model_spec(generator, n_items, n_workers, n_classes, levels, labels_per_item, seed,
                       chunk_items=chunk_items, **kwargs)  # fmt: skip


def _arrow_chunks(broadcast: Any, what: str) -> Any:
    """The function given to ``mapInArrow``: chunk indices in, label (or truth) batches out.

    Only the broadcast handle of the ``_Spec`` (sizes and planted parameters) is captured, so the
    parameters (up to tens of MB at 100k workers) are shipped once per executor, not once per task.
    """

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        spec: _Spec = broadcast.value
        names = _Names.of(spec)
        cumulative_pi = _cumulative_pi(spec.params["pi"]) if what == "labels" else None
        for batch in batches:
            for chunk in batch.column(0).to_numpy():
                chunk = int(chunk)
                if what == "labels":
                    table = _labels_table(_chunk_codes(spec, chunk, cumulative_pi), names)
                else:
                    truth, level = _chunk_truth(spec, chunk)
                    table = _truth_table(spec, chunk, names, truth, level)
                yield from table.to_batches()

    return run


def _spark_schema(schema: pa.Schema) -> str:
    kinds = {pa.string(): "string", pa.int64(): "bigint"}
    return ", ".join(f"{f.name} {kinds[f.type]}" for f in schema)


def write_parquet(
    spark: SparkSession,
    path: str,
    generator: str,
    n_items: int | None,
    n_workers: int | None,
    n_classes: int | None,
    labels_per_item: int | None,
    seed: int,
    n_partitions: int | None = None,
    *,
    n_levels: int | None = None,
    truth_path: str | None = None,
    chunk_items: int = CHUNK_ITEMS,
    **options: Any,
) -> dict[str, Any]:
    """Generate a dataset on the executors and write it as Parquet.

    ``path`` and ``truth_path`` must be new or empty directories, or data sets written by this function
    (they carry crowdspark's marker, kind ``synthetic-dataset``), which are replaced; anything else is
    refused before anything is written (:mod:`crowdspark.io.marker`).

    Chunks of ``chunk_items`` items are generated in parallel, each from its own random stream keyed by
    (seed, chunk index), so the rows do not depend on ``n_partitions``; they equal the rows of the pandas
    function with the same arguments (:func:`dawid_skene_data`, :func:`idbla_data`, :func:`paper_synthetic`).
    Only the planted parameters (O(K H C^2)) live on the driver.

    Parameters
    ----------
    spark : SparkSession
    path : str
        Output directory of the labels: columns ``item``, ``worker``, ``label`` (strings).
    generator : {"ds", "idbla", "paper"}
    n_items, n_workers, n_classes, labels_per_item : int or None
        Sizes; must be None for ``"paper"`` (fixed sizes).
    seed : int
    n_partitions : int, optional
        Spark partitions (and output files) of each dataset; default ``min(n_chunks, defaultParallelism)``.
    n_levels : int, optional
        H for ``"idbla"`` (default 2).
    truth_path : str, optional
        Output directory of the truth (``item``, ``truth`` and, except for ``"ds"``, ``level``); default
        :func:`default_truth_path` (``path + "_truth"``).
    chunk_items : int
        Items per chunk (part of the data's identity).
    **options
        Keyword options of the pandas generator (``accuracy``, ``class_proportions``, ``level_proportions``,
        ``level_noise``, ``activity_sigma``, ``off_diagonal_concentration``).

    Returns
    -------
    dict
        ``path``, ``truth_path``, ``n_chunks``, ``n_partitions`` and ``params`` (the planted parameters).
    """
    spec = _spec_for(
        generator, n_items, n_workers, n_classes, labels_per_item, seed, n_levels, chunk_items, options
    )
    if n_partitions is None:
        n_partitions = min(spec.n_chunks, spark.sparkContext.defaultParallelism)
    n_partitions = check_int("n_partitions", n_partitions, minimum=1)
    truth_path = truth_path or default_truth_path(path)
    chunks = spark.range(0, spec.n_chunks, 1, n_partitions)
    outputs = [("labels", path, LABEL_SCHEMA), ("truth", truth_path, _truth_schema(spec.with_level))]
    files = HadoopFiles(spark)  # the filesystem Spark writes to, also for paths without a scheme
    for (_, out, _), flag in zip(outputs, ("--output", "--truth-output")):
        check_replaceable(files, out.rstrip("/"), DATASET, flag)
    broadcast = spark.sparkContext.broadcast(spec)
    try:
        for what, out, schema in outputs:
            logger.info("writing %s of %s (%d chunks, %d partitions) to %s", what, generator, spec.n_chunks,
                        n_partitions, out)  # fmt: skip
            frame = chunks.mapInArrow(_arrow_chunks(broadcast, what), _spark_schema(schema))
            frame.write.mode("overwrite").parquet(out)
            write_marker(files, out.rstrip("/"), DATASET)
    finally:
        broadcast.destroy()
    return {
        "path": path,
        "truth_path": truth_path,
        "n_chunks": spec.n_chunks,
        "n_partitions": n_partitions,
        "params": _planted(spec),
    }
