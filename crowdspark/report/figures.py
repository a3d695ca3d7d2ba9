"""The report's figures, drawn as inline SVG by :mod:`crowdspark.report.svg`: each panel with labelled axes and
a legend (a heatmap: a labelled colour bar). Every name from the data is drawn literally (:func:`svg.escape`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from crowdspark.report.facts import Calibration, Histogram
from crowdspark.report.svg import BLUES, GREY, PALETTE, RED, VIRIDIS, ColourBar, Figure, Panel, visible

__all__ = [
    "convergence",
    "histogram",
    "worker_accuracy",
    "labels_per_worker",
    "crowd_confusion",
    "worker_scatter",
    "worker_gold_scatter",
    "worker_confusions",
    "series",
    "visible",
    "reliability",
    "level_accuracy",
    "accuracy_changes",
]

#: characters of a name drawn in a figure's title or tick (the tables of the page show it whole)
DRAWN_NAME = 40

#: panel sizes in px
_WIDE = (720, 330)
_SQUARE = (460, 390)


def _one(panel: Panel, bar: ColourBar | None = None) -> Figure:
    return Figure([panel], bar=bar)


def _wide(xlabel: str, ylabel: str, **options: Any) -> Panel:
    return Panel(*_WIDE, xlabel=xlabel, ylabel=ylabel, **options)


def convergence(history: list[dict[str, Any]], tol: float | None) -> Figure:
    """Objective and change per iteration; ``history`` is ``summary.json``'s (at least one row)."""
    frame = pd.DataFrame(history)
    for column in ("objective", "change", "seconds"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce") if column in frame else np.nan
    iteration = frame["iteration"].to_numpy(dtype=float)
    left = Panel(440, 330, xlabel="iteration", ylabel="objective per label")
    left.line(iteration, frame["objective"].to_numpy(dtype=float), "objective (per label)", dots=True)
    change = frame["change"].abs()
    if change.notna().any():
        right = Panel(440, 330, xlabel="iteration", ylabel="|change|", ylog=True)
        right.line(iteration, change.to_numpy(dtype=float), "change (what tol is tested against)", dots=True)
        if tol:
            right.hline(tol, f"tol = {tol:g}", RED)
    else:
        right = Panel(440, 330, xlabel="iteration", ylabel="seconds")
        right.line(iteration, frame["seconds"].to_numpy(dtype=float), "seconds per sweep (no convergence test)",
                   dots=True)
    return Figure([left, right], columns=2)


def histogram(hist: Histogram, xlabel: str, what: str, ylabel: str = "items") -> Figure:
    """Bars of a :class:`Histogram`."""
    panel = _wide(xlabel, ylabel)
    panel.bars(hist.edges, hist.counts, f"{what} ({hist.total:,})")
    widths = np.diff(hist.edges)
    if len(widths) <= 30 and np.allclose(widths, 1.0) and np.allclose(hist.edges % 1.0, 0.5):
        panel.xticks(hist.edges[:-1] + 0.5)  # one bin per integer value
    return _one(panel)


def worker_accuracy(workers: pd.DataFrame) -> Figure:
    """Histogram of the workers' estimated accuracy, with the label-weighted mean."""
    panel = _wide("estimated accuracy (probability a label is the true class)", "workers")
    known = workers[workers["accuracy"].notna()]
    accuracy = known["accuracy"].to_numpy(dtype=float)
    counts, edges = np.histogram(accuracy, bins=np.linspace(0, 1, 21))
    panel.bars(edges, counts, f"workers ({len(known):,})")
    weighted = float(np.average(accuracy, weights=known["n_labels"])) if known["n_labels"].sum() else np.nan
    panel.vline(weighted, f"mean weighted by labels: {weighted:.3f}", PALETTE[1])
    return _one(panel)


def labels_per_worker(workers: pd.DataFrame) -> Figure:
    """Histogram of the workers' numbers of labels, on logarithmic bins."""
    n = workers["n_labels"].to_numpy(dtype=float)
    low, high = max(n.min(), 1.0), max(n.max(), 1.0)
    logarithmic = high / low >= 10
    panel = _wide("labels given by the worker", "workers", xlog=logarithmic)
    bins = (np.geomspace(low, high * 1.001, 25) if logarithmic
            else np.linspace(low - 0.5, high + 0.5, min(int(high - low) + 2, 26)))
    counts, edges = np.histogram(n, bins=bins)
    panel.bars(edges, counts, f"workers ({len(n):,})")
    panel.vline(float(np.median(n)), f"median: {np.median(n):g} labels", PALETTE[1])
    return _one(panel)


def crowd_confusion(matrix: np.ndarray, classes: list[str], xlabel: str = "label given by a worker",
                    ylabel: str = "true class (inferred)", bar: str = "P(label | true class)") -> Figure:
    """Heatmap of a confusion matrix (rows: true class, columns: label, rows sum to 1): the crowd's by default."""
    side = int(min(max(_SQUARE[1], 30 * len(classes) + 200), 900))
    scale = ColourBar(bar, 0.0, 1.0, BLUES)
    panel = Panel(side + 40, side, xlabel=xlabel, ylabel=ylabel)
    panel.heatmap(matrix, classes, classes, scale, cell_text=len(classes) <= 12, limit=DRAWN_NAME)
    return _one(panel, scale)


def worker_scatter(workers: pd.DataFrame, flags: list[str]) -> Figure:
    """Each worker's estimated accuracy against its number of labels (log scale), flagged workers marked."""
    known = workers[workers["accuracy"].notna()]
    flagged = np.zeros(len(known), dtype=bool)
    for flag in flags:
        flagged |= known[flag].to_numpy(dtype=bool)
    n = known["n_labels"].to_numpy(dtype=float)
    accuracy = known["accuracy"].to_numpy(dtype=float)
    logarithmic = bool(n.size and n.max() / max(n.min(), 1.0) >= 10)
    panel = _wide("labels given by the worker", "estimated accuracy", xlog=logarithmic, ylim=(-0.02, 1.02))
    panel.points(n[~flagged], accuracy[~flagged], f"workers ({int((~flagged).sum()):,})", size=4, opacity=0.6)
    if flagged.any():
        panel.points(n[flagged], accuracy[flagged], f"flagged {' or '.join(flags)} ({int(flagged.sum()):,})", RED,
                     size=6, marker="cross", opacity=1.0)
    return _one(panel)


def worker_gold_scatter(drawn: pd.DataFrame) -> Figure:
    """Each worker's estimated accuracy against its accuracy on held-out gold items, coloured by its number of
    labels on them (log scale), with the diagonal; ``drawn`` has ``accuracy``, ``gold_accuracy``, ``gold_labels``."""
    counts = drawn["gold_labels"].to_numpy(dtype=float)
    low = max(counts.min(), 1.0)
    scale = ColourBar("labels on gold items", low, counts.max() if counts.max() > low else 10 * low, VIRIDIS,
                      log=True)  # a decade when all are equal
    panel = _wide("accuracy on held-out gold items (share of the worker's labels there that are right)",
                  "estimated accuracy", xlim=(-0.02, 1.02), ylim=(-0.02, 1.02))
    panel.line([0, 1], [0, 1], "estimate = accuracy on gold", GREY, dashed=True)
    panel.points(drawn["gold_accuracy"].to_numpy(dtype=float), drawn["accuracy"].to_numpy(dtype=float),
                 f"workers ({len(drawn):,})", size=5, values=counts, scale=scale, opacity=0.8)
    return _one(panel, scale)


def worker_confusions(matrices: np.ndarray, titles: list[str], classes: list[str]) -> Figure:
    """Small heatmaps of some workers' confusion matrices, shape (W, C, C), four to a row, one colour bar."""
    side = 230 if len(classes) <= 6 else 300
    scale = ColourBar("P(label | true class)", 0.0, 1.0, BLUES)
    shown = classes if len(classes) <= 8 else []
    figure = Figure(columns=min(len(matrices), 4), bar=scale)
    for matrix, title in zip(matrices, titles):
        panel = figure.add(Panel(side, side + 20, xlabel="label given", ylabel="true class",
                                 title=title, title_limit=DRAWN_NAME // 2 + 8))
        panel.heatmap(np.nan_to_num(matrix, nan=0.0), shown, shown, scale, cell_text=len(classes) <= 4, limit=12)
    return figure


def series(frame: pd.DataFrame, columns: list[str], ylabel: str, flagged: pd.DataFrame | None = None) -> Figure:
    """Lines of ``frame``'s ``columns`` night after night (``frame`` is indexed by night), each night whose
    value ``flagged`` marks (a frame of booleans like ``frame[columns]``) drawn as a red ring."""
    panel = _wide("night (run id)", ylabel)
    x = np.arange(len(frame), dtype=float)
    marked = False
    for k, column in enumerate(columns):
        values = frame[column].to_numpy(dtype=float)
        panel.line(x, values, visible(column, DRAWN_NAME), PALETTE[k % len(PALETTE)], dots=True)
        if flagged is not None and column in flagged:
            hit = flagged[column].to_numpy(dtype=bool) & np.isfinite(values)
            if hit.any():
                panel.points(x[hit], values[hit], None if marked else "drift flagged", RED, size=11, marker="ring")
                marked = True
    step = max(1, len(frame) // 12)
    panel.xticks(x[::step], [str(v) for v in frame.index[::step]], rotate=45, limit=16)
    return _one(panel)


def reliability(calibration: Calibration) -> Figure:
    """Reliability diagram: observed accuracy against mean confidence per bin, with the diagonal."""
    table = calibration.table
    panel = Panel(*_SQUARE, xlabel="confidence (mean in the bin)", ylabel="accuracy on gold items", xlim=(0, 1.02),
                  ylim=(0, 1.02))
    panel.line([0, 1], [0, 1], "perfect calibration", GREY, dashed=True)
    panel.line(table["mean_confidence"].to_numpy(dtype=float), table["accuracy"].to_numpy(dtype=float),
               f"this run (ECE {calibration.ece:.4f}, {calibration.n:,} gold items)", dots=True)
    return _one(panel)


def level_accuracy(per_level: np.ndarray) -> Figure:
    """Histograms of the workers' accuracy on each difficulty level; ``per_level`` has shape (K, H)."""
    panel = _wide("estimated worker accuracy on the level", "workers")
    bins = np.linspace(0, 1, 21)
    for h in range(per_level.shape[1]):
        level = per_level[:, h]
        counts, edges = np.histogram(level[np.isfinite(level)], bins=bins)
        panel.bars(edges, counts, f"level {h} ({'easiest' if h == 0 else 'harder'})", PALETTE[h % len(PALETTE)],
                   opacity=0.55)
    return _one(panel)


def accuracy_changes(deltas: np.ndarray) -> Figure:
    """Histogram of the change of each shared worker's accuracy since the previous run."""
    panel = _wide("accuracy now - accuracy in the previous run", "workers")
    reach = max(float(np.abs(deltas).max()), 1e-3)
    counts, edges = np.histogram(deltas, bins=np.linspace(-reach, reach, 31))
    panel.bars(edges, counts, f"workers in both runs ({len(deltas):,})")
    panel.vline(0.0, "no change", GREY)
    return _one(panel)
