"""The report's figures (matplotlib, Agg backend), each next to the paper's numbers where it has them.

Figure 1: the workers' accuracies; Figure 2: the CVB models' iterations; Figure 3: the NLLs; Table 2 as a
bar chart.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from jobs.reproduce.aggregates import aggregate_records
from jobs.reproduce.datasets import MIN_WORKER_LABELS
from jobs.reproduce.methods import CURVE_ALGORITHMS, PRESET_SEP, RANDOM_INIT, variant_of
from jobs.reproduce.paper import PAPER_DATASET_OF, PAPER_DATASETS, PAPER_TABLE2
from jobs.reproduce.runs import Results

__all__ = ["figure_worker_accuracy", "figure_cvb", "figure_nll", "figure_errors", "write_figures"]


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def figure_worker_accuracy(results: Results, dataset: str, path: Path, best_error: float | None) -> None:
    """Figure 1: each worker's accuracy against gold, sorted, with the mean and the best method's accuracy."""
    plt = _pyplot()
    table = pd.DataFrame(results.worker_accuracy[dataset])
    st = results.datasets[dataset]
    fig, ax = plt.subplots(figsize=(11, 4.5))
    x = np.arange(len(table))
    few = (table["n_labels"] < MIN_WORKER_LABELS).to_numpy()
    ax.bar(x[~few], table["accuracy"][~few], color="tab:blue",
           label=f"worker accuracy on gold items (>= {MIN_WORKER_LABELS} labels)")
    if few.any():
        ax.bar(x[few], table["accuracy"][few], color="tab:gray", alpha=0.6,
               label=f"worker accuracy on gold items (< {MIN_WORKER_LABELS} labels)")
    ax.axhline(st["mean_accuracy"], color="tab:orange", ls="--",
               label=f"mean worker accuracy {st['mean_accuracy']:.3f}")
    paper = PAPER_DATASETS.get(PAPER_DATASET_OF.get(dataset, ""), {})
    if paper.get("mean_accuracy"):
        ax.axhline(paper["mean_accuracy"], color="tab:gray", ls=":", label=f"paper: mean {paper['mean_accuracy']:.3f}")
    if best_error is not None:
        ax.axhline(1 - best_error / 100, color="tab:green", ls="-",
                   label=f"best aggregation method: accuracy {1 - best_error / 100:.3f}")
    ax.set_xlabel(f"worker (sorted by accuracy; {len(table)} workers)")
    ax.set_ylabel("accuracy against gold")
    ax.set_ylim(0, 1.05)
    ax.set_title(f"Figure 1: accuracy of each worker on {dataset}")
    ax.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _curves(results: Results, dataset: str) -> dict[str, dict[str, list[float | None]]]:
    return {r.method: r.curve for r in results.records
            if r.dataset == dataset and r.seed == 0 and r.curve and r.algorithm in CURVE_ALGORITHMS}


def figure_cvb(results: Results, dataset: str, path: Path, gibbs_error: float | None) -> bool:
    """Figure 2: objective and error per iteration of the CVB models (seed 0); False if none ran."""
    curves = _curves(results, dataset)
    if not curves:
        return False
    plt = _pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for method, curve in curves.items():
        it = np.arange(1, len(curve["objective"]) + 1)
        ax1.plot(it, [np.nan if v is None else v for v in curve["objective"]], marker=".", label=method)
        if "error" in curve:
            ax2.plot(it, [np.nan if v is None else 100 * v for v in curve["error"]], marker=".", label=method)
    if gibbs_error is not None:
        ax2.axhline(gibbs_error, color="black", ls="--", label=f"idbla (Gibbs) mean error {gibbs_error:.2f}")
    ax1.set_xlabel("iteration")
    ax1.set_ylabel("objective (collapsed ELBO estimate per label)")
    ax1.set_title(f"CVB objective on {dataset}")
    ax1.legend(fontsize=8)
    ax2.set_xlabel("iteration")
    ax2.set_ylabel("error rate against gold (%)")
    ax2.set_title(f"CVB error on {dataset}")
    ax2.legend(fontsize=8)
    fig.suptitle("Figure 2: collapsed variational inference iteration process (seed 0)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _colors(n: int) -> list[Any]:
    """``n`` distinct colours: tab10, then (beyond ten) the light shades of tab20 in the same hue order."""
    import matplotlib

    dark = matplotlib.colormaps["tab10"]
    light = matplotlib.colormaps["tab20"]
    palette = [dark(i) for i in range(10)] + [light(2 * i + 1) for i in range(10)]
    return [palette[i % len(palette)] for i in range(n)]


def _legend_below(ax: Any, n: int) -> None:
    ax.legend(fontsize=7, ncol=min(max(n, 1), 7), loc="upper center", bbox_to_anchor=(0.5, -0.2), frameon=False)


def _grouped_bars(ax: Any, datasets: Sequence[str], methods: Sequence[str],
                  value: Any, error: Any) -> None:
    width = 0.8 / max(len(methods), 1)
    x = np.arange(len(datasets))
    for j, (m, color) in enumerate(zip(methods, _colors(len(methods)))):
        vals = [value(ds, m) for ds in datasets]
        errs = [error(ds, m) for ds in datasets]
        ax.bar(x + (j - (len(methods) - 1) / 2) * width, [np.nan if v is None else v for v in vals], width,
               yerr=[0 if e is None else e for e in errs], capsize=2, label=m, color=color)
    ax.set_xticks(x)
    ax.set_xticklabels(datasets)


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def figure_nll(results: Results, aggs: Mapping[str, Any], path: Path) -> None:
    """Figure 3: per-label paper NLL and gold NLL per dataset and method (mean ± sd over runs)."""
    plt = _pyplot()
    datasets = list(results.datasets)
    methods = [m for m in results.method_keys()
               if any(_num(aggs.get(ds, {}).get(m, {}).get("paper_nll_mean")) is not None for ds in datasets)]
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(12, 10))
    _grouped_bars(ax1, datasets, methods, lambda ds, m: _num(aggs.get(ds, {}).get(m, {}).get("paper_nll_mean")),
                  lambda ds, m: _num(aggs.get(ds, {}).get(m, {}).get("paper_nll_std")))
    ax1.set_ylabel("-log p(L | pi, T, Q) per label")
    ax1.set_xlabel("dataset")
    ax1.set_title("Figure 3: NLL of the labels under the fitted model (the paper's quantity), mean ± sd")
    _legend_below(ax1, len(methods))
    _grouped_bars(ax2, datasets, methods, lambda ds, m: _num(aggs.get(ds, {}).get(m, {}).get("gold_nll_mean")),
                  lambda ds, m: None)
    ax2.set_ylabel("-log posterior(gold) per gold item")
    ax2.set_xlabel("dataset")
    ax2.set_title("Gold-label NLL of the posteriors (metrics.nll), mean over runs")
    _legend_below(ax2, len(methods))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def figure_errors(results: Results, aggs: Mapping[str, Any], path: Path) -> None:
    """Table 2 as a chart: error mean ± sd per dataset and method, the paper's values as black markers."""
    plt = _pyplot()
    datasets = list(results.datasets)
    methods = [m for m in results.method_keys() if variant_of(m) != RANDOM_INIT]
    fig, ax = plt.subplots(figsize=(12, 5.5))
    _grouped_bars(ax, datasets, methods, lambda ds, m: _num(aggs.get(ds, {}).get(m, {}).get("error_mean")),
                  lambda ds, m: _num(aggs.get(ds, {}).get(m, {}).get("error_std")))
    width = 0.8 / max(len(methods), 1)
    first = True
    for i, ds in enumerate(datasets):
        pname = PAPER_DATASET_OF.get(ds)
        if pname is None:
            continue
        for j, m in enumerate(methods):
            ref = PAPER_TABLE2.get(m.partition(PRESET_SEP)[0], {}).get(pname)
            if ref is not None:
                ax.plot(i + (j - (len(methods) - 1) / 2) * width, ref, "k_", ms=10, mew=2,
                        label="paper's Table 2" if first else None)
                first = False
    ax.set_xlabel("dataset")
    ax.set_ylabel("error rate (%)")
    ax.set_title("Table 2: error rate per method (mean ± sd over runs); black dashes = the paper's numbers\n"
                 "(the init=random ablation is in Table 3)")
    _legend_below(ax, len(methods) + 1)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def write_figures(results: Results, out: Path) -> dict[str, str]:
    """Write every figure into ``out``; returns title -> file name."""
    aggs = aggregate_records(results.records)
    figures: dict[str, str] = {}
    figure_errors(results, aggs, out / "table2_error_rates.png")
    figures["Error rates (Table 2)"] = "table2_error_rates.png"
    for ds in results.datasets:
        if ds.startswith("web_search"):
            errs = [_num(row.get("error_mean")) for row in aggs.get(ds, {}).values()]
            errs = [e for e in errs if e is not None]
            name = f"figure1_worker_accuracy_{ds}.png"
            figure_worker_accuracy(results, ds, out / name, min(errs) if errs else None)
            figures[f"Figure 1: worker accuracy, {ds}"] = name
    for ds in results.datasets:
        name = f"figure2_cvb_{ds}.png"
        if figure_cvb(results, ds, out / name, _num(aggs.get(ds, {}).get("idbla", {}).get("error_mean"))):
            figures[f"Figure 2: CVB iterations, {ds}"] = name
    figure_nll(results, aggs, out / "figure3_nll.png")
    figures["Figure 3: NLL"] = "figure3_nll.png"
    return figures
