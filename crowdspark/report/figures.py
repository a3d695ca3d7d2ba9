"""The report's figures (matplotlib, Agg backend), each with labelled axes and a legend (a heatmap: a labelled
colour bar), and their inline SVG text.

matplotlib is the optional extra ``report``; :func:`pyplot` says how to install it when it is missing.
"""

from __future__ import annotations

import io
import re
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.errors import ConfigError
from crowdspark.report.facts import Calibration, Histogram

__all__ = [
    "pyplot",
    "literal_text",
    "to_svg",
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

#: every text drawn as it is given: a ``$`` in a class name, a worker or an item id is a dollar sign, never
#: the start of mathtext (``$5 to $10`` would show as "5to10", ``$x^$`` would fail to parse)
LITERAL_TEXT = {"text.parse_math": False, "text.usetex": False}

#: bidirectional controls: inside a name they would reorder what follows, so a name shows them as codes
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
#: characters of a name drawn in a figure's title or tick (the tables of the page show it whole)
DRAWN_NAME = 40

_WIDE = (7.5, 3.4)
_SQUARE = (4.8, 4.0)


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend.

    Raises
    ------
    ConfigError
        When matplotlib is not installed.
    """
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigError("the run report draws its figures with matplotlib, which is not installed; install the "
                          "report extra: pip install 'crowdspark[report]' (or pip install matplotlib)") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def literal_text() -> Any:
    """A context in which the figures made (and drawn) show their text literally (:data:`LITERAL_TEXT`).

    Text artists read ``text.parse_math`` when they are made, and tick labels are made again when a figure is
    drawn: both happen inside it (:func:`to_svg` draws inside it too).
    """
    return pyplot().rc_context(LITERAL_TEXT)


def to_svg(figure: Any, name: str) -> str:
    """The figure as an ``<svg>`` element to inline in HTML, and close it.

    Text stays text (``svg.fonttype = none``); ids are salted with ``name`` so that the figures of one page do
    not share ids; the XML prolog, DOCTYPE, metadata and namespace declarations (URLs a browser never fetches,
    but that a self-contained page does not need) are removed.
    """
    plt = pyplot()
    buffer = io.StringIO()
    with plt.rc_context({"svg.fonttype": "none", "svg.hashsalt": name, **LITERAL_TEXT}):
        figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    plt.close(figure)
    text = buffer.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.S)
    text = re.sub(r'\s+xmlns(:\w+)?="[^"]*"', "", text)
    return text.strip()


def visible(name: Any, limit: int | None = None) -> str:
    """``name`` as text to show: each bidirectional control as ``<U+202E>`` (:data:`BIDI_CONTROLS`), cut to
    ``limit`` characters with an ellipsis when given."""
    text = "".join(f"<U+{ord(ch):04X}>" if ch in BIDI_CONTROLS else ch for ch in str(name))
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "\u2026"


def _plain_log(axis: Any) -> None:
    """Label the ticks of a logarithmic ``axis`` as plain numbers: matplotlib's default writes them as mathtext
    (``$\\mathdefault{10^{-6}}$``), which is shown as it is while mathtext is off (:data:`LITERAL_TEXT`)."""
    from matplotlib.ticker import LogFormatter

    axis.set_major_formatter(LogFormatter())
    axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))


def _legend(ax: Any) -> None:
    ax.legend(loc="best", fontsize=8, frameon=False)


def _finish(ax: Any, xlabel: str, ylabel: str) -> Any:
    """Label the axes, add the legend, and return the figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    _legend(ax)
    return ax.figure


def convergence(history: list[dict[str, Any]], tol: float | None) -> Any:
    """Objective and change per iteration; ``history`` is ``summary.json``'s (at least one row)."""
    plt = pyplot()
    frame = pd.DataFrame(history)
    for column in ("objective", "change", "seconds"):
        frame[column] = pd.to_numeric(frame[column], errors="coerce") if column in frame else np.nan
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4))
    left.plot(frame["iteration"], frame["objective"], marker=".", label="objective (per label)")
    left.set_xlabel("iteration")
    left.set_ylabel("objective per label")
    _legend(left)
    change = frame["change"].abs()
    if change.notna().any():
        right.semilogy(frame["iteration"], change, marker=".", label="change (what tol is tested against)")
        _plain_log(right.yaxis)
        if tol:
            right.axhline(tol, color="tab:red", ls="--", label=f"tol = {tol:g}")
    else:
        right.plot(frame["iteration"], frame["seconds"], marker=".", label="seconds per sweep (no convergence test)")
    right.set_xlabel("iteration")
    right.set_ylabel("|change|" if change.notna().any() else "seconds")
    _legend(right)
    fig.tight_layout()
    return fig


def histogram(hist: Histogram, xlabel: str, what: str, ylabel: str = "items") -> Any:
    """Bars of a :class:`Histogram`."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=_WIDE)
    widths = np.diff(hist.edges)
    ax.bar(hist.edges[:-1], hist.counts, width=widths, align="edge", edgecolor="white",
           label=f"{what} ({hist.total:,})")
    if np.allclose(widths, 1.0) and np.allclose(hist.edges % 1.0, 0.5):
        ax.set_xticks(hist.edges[:-1] + 0.5)  # one bin per integer value
    return _finish(ax, xlabel, ylabel)


def worker_accuracy(workers: pd.DataFrame) -> Any:
    """Histogram of the workers' estimated accuracy, with the label-weighted mean."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=_WIDE)
    known = workers[workers["accuracy"].notna()]
    accuracy = known["accuracy"].astype(float)
    ax.hist(accuracy, bins=np.linspace(0, 1, 21), edgecolor="white", label=f"workers ({len(known):,})")
    weighted = float(np.average(accuracy, weights=known["n_labels"])) if known["n_labels"].sum() else np.nan
    ax.axvline(weighted, color="tab:orange", ls="--", label=f"mean weighted by labels: {weighted:.3f}")
    return _finish(ax, "estimated accuracy (probability a label is the true class)", "workers")


def labels_per_worker(workers: pd.DataFrame) -> Any:
    """Histogram of the workers' numbers of labels, on logarithmic bins."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=_WIDE)
    n = workers["n_labels"].to_numpy(dtype=float)
    low, high = max(n.min(), 1.0), max(n.max(), 1.0)
    if high / low >= 10:
        ax.hist(n, bins=np.geomspace(low, high * 1.001, 25), edgecolor="white", label=f"workers ({len(n):,})")
        ax.set_xscale("log")
        _plain_log(ax.xaxis)
    else:
        ax.hist(n, bins=np.linspace(low - 0.5, high + 0.5, min(int(high - low) + 2, 26)), edgecolor="white",
                label=f"workers ({len(n):,})")
    ax.axvline(np.median(n), color="tab:orange", ls="--", label=f"median: {np.median(n):g} labels")
    return _finish(ax, "labels given by the worker", "workers")


def crowd_confusion(matrix: np.ndarray, classes: list[str], xlabel: str = "label given by a worker",
                    ylabel: str = "true class (inferred)", bar: str = "P(label | true class)") -> Any:
    """Heatmap of a confusion matrix (rows: true class, columns: label, rows sum to 1): the crowd's by default."""
    plt = pyplot()
    names = [visible(c, DRAWN_NAME) for c in classes]
    size = min(max(_SQUARE[0], 0.45 * len(classes) + 2.5), 12.0)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(matrix, vmin=0, vmax=1, cmap="Blues")
    ticks = np.arange(len(classes))
    ax.set_xticks(ticks, names, rotation=90 if len(classes) > 6 else 0)
    ax.set_yticks(ticks, names)
    if len(classes) <= 12:
        for (t, l), value in np.ndenumerate(matrix):
            ax.text(l, t, f"{value:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if value > 0.6 else "black")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    colour = fig.colorbar(image, ax=ax)
    colour.set_label(bar)
    return fig


def worker_scatter(workers: pd.DataFrame, flags: list[str]) -> Any:
    """Each worker's estimated accuracy against its number of labels (log scale), flagged workers marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=_WIDE)
    known = workers[workers["accuracy"].notna()]
    flagged = np.zeros(len(known), dtype=bool)
    for flag in flags:
        flagged |= known[flag].to_numpy(dtype=bool)
    n = known["n_labels"].to_numpy(dtype=float)
    accuracy = known["accuracy"].to_numpy(dtype=float)
    ax.scatter(n[~flagged], accuracy[~flagged], s=10, alpha=0.6, rasterized=True, label=f"workers ({int((~flagged).sum()):,})")
    if flagged.any():
        ax.scatter(n[flagged], accuracy[flagged], s=18, marker="x", color="tab:red", rasterized=True,
                   label=f"flagged {' or '.join(flags)} ({int(flagged.sum()):,})")
    if n.size and n.max() / max(n.min(), 1.0) >= 10:
        ax.set_xscale("log")
        _plain_log(ax.xaxis)
    ax.set_ylim(-0.02, 1.02)
    return _finish(ax, "labels given by the worker", "estimated accuracy")


def worker_gold_scatter(drawn: pd.DataFrame) -> Any:
    """Each worker's estimated accuracy against its accuracy on held-out gold items, coloured by its number of
    labels on them (log scale), with the diagonal; ``drawn`` has ``accuracy``, ``gold_accuracy``, ``gold_labels``."""
    from matplotlib.colors import LogNorm

    plt = pyplot()
    fig, ax = plt.subplots(figsize=_WIDE)
    ax.plot([0, 1], [0, 1], color="gray", ls="--", label="estimate = accuracy on gold")
    counts = drawn["gold_labels"].to_numpy(dtype=float)
    low = max(counts.min(), 1.0)
    scale = LogNorm(vmin=low, vmax=counts.max() if counts.max() > low else 10 * low)  # a decade when all are equal
    points = ax.scatter(drawn["gold_accuracy"].to_numpy(dtype=float), drawn["accuracy"].to_numpy(dtype=float), s=12,
                        c=counts, cmap="viridis", norm=scale, alpha=0.8, rasterized=True,
                        label=f"workers ({len(drawn):,})")
    colour = fig.colorbar(points, ax=ax)
    colour.set_label("labels on gold items")
    _plain_log(colour.ax.yaxis)
    ax.set_xlim(-0.02, 1.02)
    ax.set_ylim(-0.02, 1.02)
    return _finish(ax, "accuracy on held-out gold items (share of the worker's labels there that are right)",
                   "estimated accuracy")


def worker_confusions(matrices: np.ndarray, titles: list[str], classes: list[str]) -> Any:
    """Small heatmaps of some workers' confusion matrices, shape (W, C, C), four to a row, one colour bar."""
    plt = pyplot()
    count = len(matrices)
    columns = min(count, 4)
    rows = -(-count // columns)
    side = 2.3 if len(classes) <= 6 else 3.2
    fig, axes = plt.subplots(rows, columns, figsize=(side * columns + 1.2, side * rows + 0.4), squeeze=False)
    names = [visible(c, 12) for c in classes]
    image = None
    for k, ax in enumerate(axes.flat):
        if k >= count:
            ax.remove()
            continue
        image = ax.imshow(np.nan_to_num(matrices[k], nan=0.0), vmin=0, vmax=1, cmap="Blues")
        ax.set_title(visible(titles[k], DRAWN_NAME // 2 + 8), fontsize=8)
        ticks = np.arange(len(classes))
        shown = len(classes) <= 8
        ax.set_xticks(ticks, names if shown else [], rotation=90 if len(classes) > 3 else 0, fontsize=7)
        ax.set_yticks(ticks, names if shown else [], fontsize=7)
        if len(classes) <= 4:
            for (t, l), value in np.ndenumerate(np.nan_to_num(matrices[k], nan=0.0)):
                ax.text(l, t, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if value > 0.6 else "black")
        ax.set_xlabel("label given", fontsize=8)
        ax.set_ylabel("true class", fontsize=8)
    colour = fig.colorbar(image, ax=[a for a in axes.flat if a.figure is fig], shrink=0.8)
    colour.set_label("P(label | true class)")
    return fig


def series(frame: pd.DataFrame, columns: list[str], ylabel: str, flagged: pd.DataFrame | None = None) -> Any:
    """Lines of ``frame``'s ``columns`` night after night (``frame`` is indexed by night), each night whose
    value ``flagged`` marks (a frame of booleans like ``frame[columns]``) drawn as a red ring."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=_WIDE)
    x = np.arange(len(frame))
    marked = False
    for column in columns:
        values = frame[column].to_numpy(dtype=float)
        ax.plot(x, values, marker=".", label=visible(column, DRAWN_NAME))
        if flagged is not None and column in flagged:
            hit = flagged[column].to_numpy(dtype=bool) & np.isfinite(values)
            if hit.any():
                ax.scatter(x[hit], values[hit], s=90, facecolors="none", edgecolors="tab:red", linewidths=1.5,
                           label=None if marked else "drift flagged", zorder=3)
                marked = True
    step = max(1, len(frame) // 12)
    ax.set_xticks(x[::step], [visible(v, 16) for v in frame.index[::step]], rotation=45, ha="right", fontsize=7)
    return _finish(ax, "night (run id)", ylabel)


def reliability(calibration: Calibration) -> Any:
    """Reliability diagram: observed accuracy against mean confidence per bin, with the diagonal."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=_SQUARE)
    table = calibration.table
    ax.plot([0, 1], [0, 1], color="gray", ls="--", label="perfect calibration")
    ax.plot(table["mean_confidence"], table["accuracy"], marker="o",
            label=f"this run (ECE {calibration.ece:.4f}, {calibration.n:,} gold items)")
    ax.set_xlim(0, 1.02)
    ax.set_ylim(0, 1.02)
    return _finish(ax, "confidence (mean in the bin)", "accuracy on gold items")


def level_accuracy(per_level: np.ndarray) -> Any:
    """Histograms of the workers' accuracy on each difficulty level; ``per_level`` has shape (K, H)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=_WIDE)
    bins = np.linspace(0, 1, 21)
    for h in range(per_level.shape[1]):
        level = per_level[:, h]
        ax.hist(level[np.isfinite(level)], bins=bins, alpha=0.55, edgecolor="white",
                label=f"level {h} ({'easiest' if h == 0 else 'harder'})")
    return _finish(ax, "estimated worker accuracy on the level", "workers")


def accuracy_changes(deltas: np.ndarray) -> Any:
    """Histogram of the change of each shared worker's accuracy since the previous run."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=_WIDE)
    reach = max(float(np.abs(deltas).max()), 1e-3)
    ax.hist(deltas, bins=np.linspace(-reach, reach, 31), edgecolor="white",
            label=f"workers in both runs ({len(deltas):,})")
    ax.axvline(0, color="gray", ls=":", label="no change")
    return _finish(ax, "accuracy now - accuracy in the previous run", "workers")
