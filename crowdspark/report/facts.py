"""What a run's report shows, computed on the driver from the run directory.

Everything item-level is reduced while it streams (:func:`crowdspark.report.tables.item_batches`): histograms
with fixed bins, label counts, level counts, and the calibration of the gold items (the gold is held on the
driver, as the run does).  Only the comparison with a previous run holds three columns of both runs' items.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.errors import CrowdsparkError
from crowdspark.io.paths import is_local
from crowdspark.report.tables import (
    GOLD_WORKERS,
    item_columns,
    item_record_batches,
    dictionary_positions,
    read_label_columns,
    read_queue,
    read_summary,
    read_table,
    read_workers,
    table_format,
)

__all__ = [
    "Histogram", "Calibration", "GoldConfusion", "WorkerGold", "RunGold", "Changes", "ItemFacts", "RunFacts",
    "summary_calibration", "gold_confusion", "worker_gold", "worker_gold_counted", "worker_matrices", "flag_columns",
    "class_bias", "spotlight_workers", "collect"]

#: bins of the confidence histogram and of the reliability table (equal width on [0, 1])
CONFIDENCE_BINS = 20
CALIBRATION_BINS = 10
#: bins of any other per-item number; integers spanning at most this many values get one bin each
OTHER_BINS = 30
#: rows of the tables of largest moves, flipped items and the relabel queue
TOP_ROWS = 15
#: workers whose own confusion matrices are drawn, for each reason (most labels, each flag, moved most)
SPOTLIGHT_PER_REASON = 3
#: labels on held-out gold items a worker needs to be drawn against its accuracy on them (with fewer, that
#: accuracy is too noisy to compare: one label more or less moves it by 0.1 or more)
MIN_GOLD_LABELS = 10

_NOT_DRAWN = ("item", "label")


@dataclass(frozen=True)
class Histogram:
    """Counts of values in bins.

    Attributes
    ----------
    edges : ndarray, shape (b + 1,)
    counts : ndarray of int64, shape (b,)
    """

    edges: np.ndarray
    counts: np.ndarray

    @property
    def total(self) -> int:
        return int(self.counts.sum())


@dataclass(frozen=True)
class Calibration:
    """Confidence bins against observed accuracy on held-out gold items.

    Attributes
    ----------
    table : DataFrame
        One row per non-empty bin: ``low``, ``high``, ``items``, ``mean_confidence``, ``accuracy``.
    ece : float
        Expected calibration error: sum over bins of (items / n) * |accuracy - mean confidence|.
    n : int
        Gold items scored.
    source : str
        Who computed it: the run (``summary.json``'s ``quality.calibration``) or the report (items and gold).
    """

    table: pd.DataFrame
    ece: float
    n: int
    source: str = "computed by the report from items/ and the gold file"


@dataclass(frozen=True)
class GoldConfusion:
    """The inferred labels of the held-out gold items against their true classes.

    Attributes
    ----------
    classes : list of str, length C
    counts : ndarray of int64, shape (C, C)
        ``counts[t, l]``: gold items of true class ``t`` whose inferred label is ``l``.
    """

    classes: list[str]
    counts: np.ndarray

    @property
    def n(self) -> int:
        return int(self.counts.sum())

    def table(self) -> pd.DataFrame:
        """One row per class: ``gold items`` (support), ``accuracy`` (share labelled right: recall),
        ``precision`` (of the gold items labelled the class, the share truly of it) and ``most confused with``
        (the wrong label most given to the class, empty when none is)."""
        support = self.counts.sum(axis=1)
        labelled = self.counts.sum(axis=0)
        right = np.diag(self.counts)
        with np.errstate(invalid="ignore", divide="ignore"):
            accuracy = np.where(support > 0, right / support, np.nan)
            precision = np.where(labelled > 0, right / labelled, np.nan)
        wrong = self.counts - np.diag(right)
        confused = [self.classes[int(np.argmax(row))] if row.max() > 0 else "" for row in wrong]
        return pd.DataFrame({"class": self.classes, "gold items": support, "accuracy": accuracy,
                             "precision": precision, "most confused with": confused})


def gold_confusion(truth: Any, label: Any, classes: list[str]) -> np.ndarray:
    """Counts of (true class, inferred label) pairs, shape (C, C); pairs naming a class outside ``classes`` are
    left out.

    Parameters
    ----------
    truth, label : ndarray of str or pyarrow string array, shape (n,)
        The gold items' true classes and inferred labels.
    classes : list of str, length C
    """
    C = len(classes)
    t, lab = _class_codes(truth, classes), _class_codes(label, classes)
    known = (t >= 0) & (lab >= 0)
    return np.bincount(t[known] * C + lab[known], minlength=C * C).reshape(C, C)


def _class_codes(values: Any, classes: list[str]) -> np.ndarray:
    """The position of each value in ``classes``, -1 for a value (or a null) that is not among them, shape (n,)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not isinstance(values, (pa.Array, pa.ChunkedArray)):
        values = pa.array([v if isinstance(v, str) else None for v in values], type=pa.string())
    codes = pc.index_in(values, value_set=pa.array(classes, type=pa.string()))
    return np.asarray(codes.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)


@dataclass(frozen=True)
class WorkerGold:
    """Each worker's labels on the held-out gold items, beside its estimated accuracy.

    Attributes
    ----------
    table : DataFrame
        One row per worker of ``workers/`` with at least one label on a held-out gold item: ``worker``,
        ``n_labels``, ``accuracy`` (estimated by the run), ``gold_labels`` (its labels on held-out gold items),
        ``gold_accuracy`` (the share of those equal to the gold).
    min_labels : int
        Gold labels a worker needs to be drawn (:data:`MIN_GOLD_LABELS`).
    """

    table: pd.DataFrame
    min_labels: int = MIN_GOLD_LABELS

    @property
    def drawn(self) -> pd.DataFrame:
        return self.table[self.table["gold_labels"] >= self.min_labels]

    @property
    def left_out(self) -> int:
        """Workers with some gold labels, but fewer than :attr:`min_labels`."""
        return int((self.table["gold_labels"] < self.min_labels).sum())


def worker_gold(workers: pd.DataFrame, labels: list[Any], truth: pd.Series, classes: list[str],
                min_labels: int = MIN_GOLD_LABELS) -> WorkerGold:
    """Count each worker's labels on the gold items ``truth`` (item -> true class) and the right ones.

    Parameters
    ----------
    workers : DataFrame
        ``workers/`` (``worker``, ``n_labels``, ``accuracy``), K rows.
    labels : list of pyarrow RecordBatch
        The labels (columns ``item``, ``worker``, ``label``: dictionary arrays of strings;
        :func:`crowdspark.report.tables.read_label_columns`), counted one batch at a time.
    truth : Series
        Index: item ids; values: their true classes (held-out gold).
    classes : list of str, length C
    """
    import pyarrow as pa

    def lookup(role: str, values: Any) -> Any:
        return dictionary_positions([b.column(role) for b in labels], pa.array(values, type=pa.string()))

    item_at = lookup("item", truth.index.to_numpy(dtype=object))
    label_at = lookup("label", classes)
    worker_at = lookup("worker", workers["worker"].astype(str).to_numpy(dtype=object))
    true_class = _class_codes(pa.array(truth.to_numpy(dtype=object), type=pa.string()), classes)
    K = len(workers)
    counted, right = np.zeros(K, dtype=np.int64), np.zeros(K, dtype=np.int64)
    for batch in labels:
        at = item_at(batch.column("item"))
        on_gold = at >= 0
        who = worker_at(batch.column("worker"))[on_gold]
        given = label_at(batch.column("label"))[on_gold]
        true = true_class[at[on_gold]]
        kept = who >= 0
        counted += np.bincount(who[kept], minlength=K)
        right += np.bincount(who[kept & (given == true) & (given >= 0)], minlength=K)
    return _worker_gold_table(workers, counted, right, min_labels)


def worker_gold_counted(workers: pd.DataFrame, counts: pd.DataFrame, min_labels: int = MIN_GOLD_LABELS
                        ) -> WorkerGold:
    """:func:`worker_gold` from the counts the run wrote (``gold_workers/``: ``worker``, ``gold_labels``,
    ``gold_right``; a worker it does not list has no label on the held-out gold)."""
    by_worker = counts.set_index(counts["worker"].astype(str))
    names = workers["worker"].astype(str)
    counted = by_worker["gold_labels"].reindex(names).fillna(0).to_numpy(dtype=np.int64)
    right = by_worker["gold_right"].reindex(names).fillna(0).to_numpy(dtype=np.int64)
    return _worker_gold_table(workers, counted, right, min_labels)


def _worker_gold_table(workers: pd.DataFrame, counted: np.ndarray, right: np.ndarray, min_labels: int
                       ) -> WorkerGold:
    """The :class:`WorkerGold` of ``workers`` (K rows) from their labels on the held-out gold and the right
    ones (both shape (K,))."""
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(counted > 0, right / counted, np.nan)
    table = workers[["worker", "n_labels", "accuracy"]].assign(gold_labels=counted, gold_accuracy=share)
    return WorkerGold(table=table[counted > 0].reset_index(drop=True), min_labels=min_labels)


@dataclass(frozen=True)
class RunGold:
    """What the run wrote of its held-out gold: the inferred labels against the gold (``summary.json``'s
    ``quality.calibration.confusion``, shape (C, C)) and each worker's labels on it (``gold_workers/``)."""

    confusion: np.ndarray
    workers: pd.DataFrame


def _run_gold(summary: dict[str, Any], run_dir: str, fmt: str) -> RunGold | None:
    """The held-out gold's figures as the run wrote them, or ``None`` for a result without them (written
    before the run wrote them, without gold, or without quality statistics)."""
    confusion = ((summary.get("quality") or {}).get("calibration") or {}).get("confusion")
    table = read_table(run_dir, GOLD_WORKERS, fmt)
    if not summary.get("inputs", {}).get("gold") or confusion is None or table is None:
        return None
    return RunGold(np.asarray(confusion, dtype=np.int64), table)


def _worker_gold(summary: dict[str, Any], workers: pd.DataFrame | None, truth: pd.Series | None,
                 classes: list[str], run_gold: RunGold | None = None) -> tuple[WorkerGold | None, str]:
    """Each worker's accuracy on the held-out gold, from the counts the run wrote (``run_gold``) or else from
    the labels file the run read, or ``None`` and why."""
    if (truth is None and run_gold is None) or workers is None or not len(workers):
        return None, ""
    config = summary.get("config", {}).get("input", {})
    path = summary.get("inputs", {}).get("labels")
    if config.get("filter") or config.get("date_column") or summary.get("items_scope", "all").split(":")[0] != "all":
        return None, ("this run read part of its labels file (input.filter, a date window, or an incremental night), "
                      "which the report does not read again, so there is no accuracy on gold per worker")
    if run_gold is not None:
        return worker_gold_counted(workers, run_gold.workers), ""
    if not path or not is_local(path):
        return None, f"the labels {path!r} are not on local disk here, so there is no accuracy on gold per worker"
    columns = {role: config.get(role, role) for role in ("item", "worker", "label")}
    try:
        labels = read_label_columns(path, str(config.get("format", "auto")), columns)
    except (CrowdsparkError, OSError) as exc:
        return None, f"the labels {path!r} could not be read here ({exc}), so there is no accuracy on gold per worker"
    return worker_gold(workers, labels, truth, classes), ""


@dataclass
class Changes:
    """What changed since the previous run (both tables are empty when nothing is shared)."""

    previous: str
    workers: pd.DataFrame
    worker_deltas: np.ndarray
    workers_new: int
    workers_gone: int
    items_shared: int
    items_new: int
    items_gone: int
    flips: pd.DataFrame
    flipped: pd.DataFrame
    n_flipped: int


@dataclass
class ItemFacts:
    """Streamed summaries of ``items/``."""

    n: int = 0
    label_counts: pd.Series = field(default_factory=lambda: pd.Series(dtype="int64"))
    histograms: dict[str, Histogram] = field(default_factory=dict)
    integer_columns: tuple[str, ...] = ()


@dataclass
class RunFacts:
    """Everything the page draws; a ``*_note`` says why its part is missing when it is ``None``."""

    run_dir: str
    summary: dict[str, Any]
    workers: pd.DataFrame | None
    items: ItemFacts
    calibration: Calibration | None
    calibration_note: str
    gold: GoldConfusion | None
    changes: Changes | None
    changes_note: str
    relabel: pd.DataFrame | None
    spotlight: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=["row", "worker", "why"]))
    worker_gold: WorkerGold | None = None
    worker_gold_note: str = ""


def _bins(column: str, low: float, high: float, integer: bool) -> np.ndarray:
    if column == "confidence":
        return np.linspace(0.0, 1.0, CONFIDENCE_BINS + 1)
    if integer and high - low <= OTHER_BINS:
        return np.arange(low - 0.5, high + 1.0, 1.0)
    if high <= low:
        return np.array([low - 0.5, low + 0.5])
    return np.linspace(low, high, OTHER_BINS + 1)


def _numbers(column: Any) -> np.ndarray:
    """The values of an Arrow column as floats, nulls and NaN left out."""
    values = np.asarray(column.drop_null().to_numpy(zero_copy_only=False), dtype=float)
    return values[~np.isnan(values)]


def _label_counts(counts: dict[str, int]) -> pd.Series:
    """Items per inferred label, by label."""
    return pd.Series(counts, dtype="int64").sort_index() if counts else pd.Series(dtype="int64")


def _ranges(run_dir: str, fmt: str, numeric: list[str]) -> tuple[int, pd.Series, dict[str, tuple[float, float]],
                                                                     set[str]]:
    """First pass: item count, label counts, and each numeric column's range and whether it holds integers."""
    import pyarrow.compute as pc

    n, labels = 0, {}
    low = {c: np.inf for c in numeric}
    high = {c: -np.inf for c in numeric}
    integer = set(numeric)
    for batch in item_record_batches(run_dir, fmt, ["label", *numeric]):
        n += batch.num_rows
        for row in pc.value_counts(batch.column(0).drop_null()).to_pylist():
            labels[row["values"]] = labels.get(row["values"], 0) + row["counts"]
        for position, column in enumerate(numeric, start=1):
            values = _numbers(batch.column(position))
            if values.size:
                low[column] = min(low[column], float(values.min()))
                high[column] = max(high[column], float(values.max()))
                if column in integer and not np.all(values == np.round(values)):
                    integer.discard(column)
    ranges = {c: (low[c], high[c]) for c in numeric if np.isfinite(low[c])}
    return n, _label_counts(labels), ranges, integer


def _gold_truth(summary: dict[str, Any], gold_path: str | None) -> tuple[pd.Series | None, str]:
    """The held-out gold as ``item -> truth``, or ``None`` and why there is none."""
    path = gold_path or summary.get("inputs", {}).get("gold")
    if not path:
        return None, ("this run was given no gold (--gold), so there is no calibration against gold; "
                      "`crowdspark report RUN_DIR --gold FILE` draws it from a gold file")
    from crowdspark.config import GoldConfig
    from crowdspark.io.pandas_reader import prepare_gold, read_frame
    from crowdspark.rng import item_keys

    config = GoldConfig(**{k: v for k, v in summary.get("config", {}).get("gold", {}).items()
                           if k in ("item", "truth", "format", "fit_fraction", "split_seed")})
    try:
        frame = read_frame(path, config.format, "gold")
        gold = prepare_gold(frame, config, list(summary["classes"]), path)
    except (CrowdsparkError, OSError) as exc:
        return None, f"the gold {path!r} could not be read here ({exc}); give it with --gold FILE"
    truth = gold.frame.set_index("item")["truth"]
    held_out = ~config.split().in_fit(item_keys(truth.index.to_numpy()))
    return truth[held_out], ""


def _calibration(confidence: np.ndarray, correct: np.ndarray) -> Calibration:
    edges = np.linspace(0.0, 1.0, CALIBRATION_BINS + 1)
    which = np.clip(np.searchsorted(edges, confidence, side="right") - 1, 0, CALIBRATION_BINS - 1)
    items = np.bincount(which, minlength=CALIBRATION_BINS)
    conf_sum = np.bincount(which, weights=confidence, minlength=CALIBRATION_BINS)
    right = np.bincount(which, weights=correct.astype(float), minlength=CALIBRATION_BINS)
    kept = items > 0
    table = pd.DataFrame({"low": edges[:-1][kept], "high": edges[1:][kept], "items": items[kept],
                          "mean_confidence": conf_sum[kept] / items[kept], "accuracy": right[kept] / items[kept]})
    n = int(items.sum())
    ece = float(np.sum(table["items"] / n * np.abs(table["accuracy"] - table["mean_confidence"]))) if n else 0.0
    return Calibration(table=table, ece=ece, n=n)


def summary_calibration(summary: dict[str, Any]) -> Calibration | None:
    """The calibration the run computed itself (``summary.json``'s ``quality.calibration``), when it has one."""
    computed = (summary.get("quality") or {}).get("calibration") or {}
    rows = [row for row in computed.get("bins", []) if row.get("items")]
    if not rows or computed.get("ece") is None:
        return None
    table = pd.DataFrame(rows)[["low", "high", "items", "mean_confidence", "accuracy"]]
    return Calibration(table=table, ece=float(computed["ece"]), n=int(computed.get("n_gold", table["items"].sum())),
                       source='computed by the run (summary.json, "quality.calibration")')


def _counts(values: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """``np.histogram(values, edges)``'s counts, by numpy's arithmetic for equal bins when ``edges`` are those
    of ``np.linspace`` (the same counts, without sorting ``values``)."""
    if np.array_equal(edges, np.linspace(edges[0], edges[-1], len(edges))):
        return np.histogram(values, bins=len(edges) - 1, range=(edges[0], edges[-1]))[0]
    return np.histogram(values, bins=edges)[0]


def _item_pass(run_dir: str, fmt: str, numeric: list[str], truth: pd.Series | None, classes: list[str]
               ) -> tuple[ItemFacts, Calibration | None, GoldConfusion | None]:
    """Both passes over ``items/``: ranges first, then the histograms, the gold items' confidences and their
    confusion against the gold."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n, labels, ranges, integer = _ranges(run_dir, fmt, numeric)
    edges = {c: _bins(c, *ranges[c], c in integer) for c in ranges}
    counts = {c: np.zeros(len(e) - 1, dtype=np.int64) for c, e in edges.items()}
    scored_conf, scored_right = [], []
    confusion = np.zeros((len(classes), len(classes)), dtype=np.int64)
    gold_items = gold_truth = None
    ids: list[str] = []
    if truth is not None:
        gold_items = pa.array(truth.index.to_numpy(dtype=object), type=pa.string())
        gold_truth = pa.array(truth.to_numpy(dtype=object), type=pa.string())
        ids = ["item", "label"]
    for batch in item_record_batches(run_dir, fmt, [*ids, *edges]):
        for position, column in enumerate(edges, start=len(ids)):
            counts[column] += _counts(_numbers(batch.column(position)), edges[column])
        if gold_items is None:
            continue
        true = gold_truth.take(pc.index_in(batch.column(0), value_set=gold_items))
        has = true.is_valid()
        true, label = true.filter(has), batch.column(1).filter(has)
        confusion += gold_confusion(true, label, classes)
        if "confidence" in edges:
            scored_conf.append(np.asarray(batch.column(2 + list(edges).index("confidence")).filter(has)
                                          .to_numpy(zero_copy_only=False), dtype=float))
            scored_right.append(np.asarray(pc.equal(label, true).fill_null(False).to_numpy(zero_copy_only=False),
                                           dtype=bool))
    facts = ItemFacts(n=n, label_counts=labels, histograms={c: Histogram(edges[c], counts[c]) for c in edges},
                      integer_columns=tuple(sorted(integer & set(edges))))
    gold = GoldConfusion(classes, confusion) if confusion.sum() else None
    if not scored_conf or not sum(len(c) for c in scored_conf):
        return facts, None, gold
    return facts, _calibration(np.concatenate(scored_conf), np.concatenate(scored_right)), gold


def _previous_dir(summary: dict[str, Any]) -> tuple[str | None, str]:
    inputs = summary.get("inputs", {})
    previous = (inputs.get("previous_run") or {}).get("path") or inputs.get("warm_start")
    if not previous:
        return None, ("this run has no previous run (it was not started with --warm-start, nor written with "
                      "--run-id after another run), so there is nothing to compare with")
    if not os.path.exists(os.path.join(previous, "summary.json")):
        return None, (f"the previous run {previous!r} is not readable here (pruned by nightly.keep_runs, "
                      "remote, or a saved model rather than a result), so there is nothing to compare with")
    return previous, ""


def _worker_moves(current: pd.DataFrame, previous: pd.DataFrame) -> tuple[pd.DataFrame, np.ndarray, int, int]:
    both = current[["worker", "accuracy", "n_labels"]].merge(
        previous[["worker", "accuracy", "n_labels"]], on="worker", suffixes=("", "_before"))
    both["change"] = both["accuracy"] - both["accuracy_before"]
    top = both.reindex(both["change"].abs().sort_values(ascending=False).index).head(TOP_ROWS)
    return (top[["worker", "accuracy_before", "accuracy", "change", "n_labels_before", "n_labels"]],
            both["change"].to_numpy(), len(current) - len(both), len(previous) - len(both))


#: the columns of two runs' items the comparison reads
_COMPARED = ("item", "label", "confidence")


def _item_labels(run_dir: str, fmt: str) -> Any:
    """``items/``'s item, label and confidence as one pyarrow Table (no Python object per cell)."""
    import pyarrow as pa

    batches = list(item_record_batches(run_dir, fmt, _COMPARED))
    if batches:
        return pa.Table.from_batches(batches).cast(pa.schema([("item", pa.string()), ("label", pa.string()),
                                                              ("confidence", pa.float64())]))
    return pa.table({"item": pa.array([], pa.string()), "label": pa.array([], pa.string()),
                     "confidence": pa.array([], pa.float64())})


def _flipped_items(now: Any, then: Any) -> tuple[int, pd.DataFrame]:
    """The items of both runs (pyarrow Tables of :func:`_item_labels`): how many, and those whose label changed
    (``item``, ``label``, ``confidence``, ``label_before``, ``confidence_before``) in the order of ``now``, indexed by
    their position among the shared items in that order.  Each item of ``now`` is looked up in a hash set of
    ``then``'s; only the flipped rows become pandas objects."""
    import pyarrow as pa
    import pyarrow.compute as pc

    found = pc.index_in(now["item"], value_set=then["item"])
    shared = now.filter(pc.is_valid(found))
    before = then.take(found.filter(pc.is_valid(found)))
    changed = pc.fill_null(pc.not_equal(shared["label"], before["label"]), True).to_numpy(zero_copy_only=False)
    positions = pa.array(np.flatnonzero(changed))
    flipped = pa.table({"item": shared["item"].take(positions), "label": shared["label"].take(positions),
                        "confidence": shared["confidence"].take(positions),
                        "label_before": before["label"].take(positions),
                        "confidence_before": before["confidence"].take(positions)}).to_pandas()
    flipped.index = positions.to_numpy()
    return shared.num_rows, flipped


def _changes(run_dir: str, fmt: str, previous: str, workers: pd.DataFrame | None) -> Changes:
    before = read_summary(previous)
    before_fmt = table_format(before)
    old_workers = read_workers(previous, before_fmt)
    if workers is not None and old_workers is not None:
        moves, deltas, new, gone = _worker_moves(workers, old_workers)
    else:
        moves, deltas, new, gone = pd.DataFrame(), np.zeros(0), 0, 0
    now, then = _item_labels(run_dir, fmt), _item_labels(previous, before_fmt)
    shared, flipped = _flipped_items(now, then)
    flips = pd.crosstab(flipped["label_before"], flipped["label"]) if len(flipped) else pd.DataFrame()
    examples = flipped.sort_values("confidence", ascending=False).head(TOP_ROWS)
    return Changes(previous=previous, workers=moves, worker_deltas=deltas, workers_new=new, workers_gone=gone,
                   items_shared=shared, items_new=now.num_rows - shared, items_gone=then.num_rows - shared,
                   flips=flips, flipped=examples[["item", "label_before", "label", "confidence_before", "confidence"]],
                   n_flipped=len(flipped))


def worker_matrices(workers: pd.DataFrame, n_classes: int) -> np.ndarray:
    """Each worker's confusion matrix, shape (K, C, C), by the pipeline's rule
    (:func:`crowdspark.models.base.worker_confusion`) from a ``workers/`` table read back, whose ``confusion``
    cells are nested lists."""
    from crowdspark.models.base import worker_confusion

    if "confusion" in workers:
        return worker_confusion({"confusion": _stacked(workers["confusion"].to_numpy())}, n_classes)
    return worker_confusion({"accuracy": workers["accuracy"].to_numpy(dtype=float)}, n_classes)


def _stacked(cells: np.ndarray) -> np.ndarray:
    """The K nested-list cells of a ``confusion`` column as one array, shape (K, C, C): their rows joined end to
    end (no loop over workers) when every cell is C rows of C numbers, else cell by cell."""
    size = len(cells[0]) if len(cells) else 0
    try:
        rows = np.concatenate(cells)
        lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
        flat = np.concatenate(rows).astype(float)
        if len(rows) == len(cells) * size and np.all(lengths == size) and flat.size == len(rows) * size:
            return flat.reshape(len(cells), size, size)
    except (TypeError, ValueError):
        pass
    return np.stack([np.stack([np.asarray(row, dtype=float) for row in m]) for m in cells])


def flag_columns(workers: pd.DataFrame) -> list[str]:
    """The boolean columns of ``workers/`` (a flag such as ``spammer``)."""
    return [c for c in workers.columns if workers[c].dtype == bool]


def class_bias(matrices: np.ndarray) -> np.ndarray:
    """How much each worker over-gives one label whatever the true class, shape (K,): the largest column mean of
    its confusion matrix less ``1 / C`` (0 for a worker whose labels, over classes of equal size, are spread
    evenly; ``1 - 1/C`` for one who always gives the same label).  Undefined rows are left out.

    Parameters
    ----------
    matrices : ndarray, shape (K, C, C)
    """
    with np.errstate(invalid="ignore"):
        means = np.nanmean(matrices, axis=1)
    return np.nan_to_num(np.nanmax(np.where(np.isfinite(means), means, -np.inf), axis=1) - 1.0 / matrices.shape[2],
                         neginf=0.0)


def spotlight_workers(workers: pd.DataFrame, changes: Changes | None, n_classes: int = 0,
                      per_reason: int = SPOTLIGHT_PER_REASON) -> pd.DataFrame:
    """The workers whose own confusion matrices the page draws, and why: the ``per_reason`` workers with most
    labels, the workers (with at least the median number of labels) most biased to one label
    (:func:`class_bias`, with ``n_classes``), the flagged workers with most labels (for each flag), and those
    whose estimated accuracy rose and fell most since the previous run (among the moves :class:`Changes`
    lists).

    Returns
    -------
    DataFrame
        ``row`` (the worker's position in ``workers``), ``worker`` and ``why`` (its reasons, joined), one row
        per worker, in the order chosen.
    """
    chosen: dict[int, list[str]] = {}
    position = pd.Series(np.arange(len(workers)), index=workers["worker"].astype(str))

    def add(rows: pd.Index, reason: str) -> None:
        for row in rows:
            chosen.setdefault(int(row), []).append(reason)

    ranked = workers.reset_index(drop=True)
    add(ranked.nlargest(per_reason, "n_labels").index, "most labels")
    if n_classes:
        bias = pd.Series(class_bias(worker_matrices(ranked, n_classes)))
        prolific = ranked["n_labels"] >= ranked["n_labels"].median()
        add(bias[prolific & (bias > 0)].nlargest(per_reason).index, "most biased to one label")
    for flag in flag_columns(workers):
        add(ranked[ranked[flag]].nlargest(per_reason, "n_labels").index, f"flagged {flag}")
    if changes is not None and len(changes.workers):
        moves = changes.workers
        for rows, reason in ((moves[moves["change"] > 0].nlargest(per_reason, "change"), "improved most"),
                             (moves[moves["change"] < 0].nsmallest(per_reason, "change"), "degraded most")):
            add(pd.Index(position.reindex(rows["worker"].astype(str)).dropna().astype(int)),
                f"{reason} since the previous run")
    rows = list(chosen)
    return pd.DataFrame({"row": rows, "worker": ranked["worker"].iloc[rows].to_numpy() if rows else [],
                         "why": ["; ".join(chosen[r]) for r in rows]})


def collect(run_dir: str, gold_path: str | None = None) -> RunFacts:
    """Read the run directory ``run_dir`` (local, resolved) and compute what its report shows.

    Parameters
    ----------
    run_dir : str
        A result directory holding ``summary.json``.
    gold_path : str, optional
        Gold to calibrate against instead of the run's own ``--gold`` (read with the run's gold settings).
    """
    summary = read_summary(run_dir)
    fmt = table_format(summary)
    workers = read_workers(run_dir, fmt)
    columns, numeric = item_columns(run_dir, fmt)
    run_gold = None if gold_path else _run_gold(summary, run_dir, fmt)
    truth, calibration_note = (None, "") if run_gold is not None else _gold_truth(summary, gold_path)
    classes = [str(c) for c in summary.get("classes", [])]
    if columns:
        items, calibration, gold = _item_pass(run_dir, fmt, [c for c in numeric if c not in _NOT_DRAWN], truth,
                                              classes)
    else:
        items, calibration, gold = ItemFacts(), None, None
    if run_gold is not None and columns and run_gold.confusion.sum():
        gold = GoldConfusion(classes, run_gold.confusion)
    if (truth is not None or run_gold is not None) and gold is None:
        calibration_note = "no gold item is among this run's items, so there is no calibration against gold"
    calibration = (None if gold_path else summary_calibration(summary)) or calibration
    previous, changes_note = _previous_dir(summary)
    changes = _changes(run_dir, fmt, previous, workers) if previous and columns else None
    relabel = read_queue(os.path.join(run_dir, "relabel"), fmt, TOP_ROWS)
    facts = RunFacts(run_dir=run_dir, summary=summary, workers=workers, items=items, calibration=calibration,
                     calibration_note=calibration_note, gold=gold, changes=changes, changes_note=changes_note,
                     relabel=relabel)
    if workers is not None and len(workers):
        facts.spotlight = spotlight_workers(workers, changes, len(classes))
    facts.worker_gold, facts.worker_gold_note = _worker_gold(summary, workers, truth, classes, run_gold)
    return facts
