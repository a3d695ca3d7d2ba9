"""The report's text: markdown tables of the run next to the paper's numbers, ``report.md`` and the README summary.

Every number comes from the run's aggregates except the rows and columns marked "paper"
(:mod:`jobs.reproduce.paper`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from jobs.reproduce.aggregates import aggregate_records, has_levels
from jobs.reproduce.claims import Claim, check_claims
from jobs.reproduce.datasets import MIN_WORKER_LABELS
from jobs.reproduce.methods import PRESET_SEP, RANDOM_INIT
from jobs.reproduce.paper import (
    PAPER_DATASET_OF,
    PAPER_DATASETS,
    PAPER_LEVEL_ERROR,
    PAPER_METHOD_NAMES,
    PAPER_TABLE2,
    PAPER_TABLE3,
)
from jobs.reproduce.runs import Results

__all__ = [
    "markdown_table",
    "table_datasets",
    "table_errors",
    "table_paper_comparison",
    "table_paper_reference",
    "table_init",
    "table_levels",
    "table_nll",
    "table_time",
    "table_claims",
    "render_report",
    "summary_markdown",
]


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table; ``None`` cells print as ``-``.

    >>> print(markdown_table(["a", "b"], [[1, None]]))
    | a | b |
    |---|---|
    | 1 | - |
    """
    def cell(v: Any) -> str:
        return "-" if v is None else str(v).replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def _pm(mean: Any, std: Any, digits: int = 2) -> str | None:
    if mean is None:
        return None
    if mean == "inf" or (isinstance(mean, float) and math.isinf(mean)):
        return "inf"
    return f"{mean:.{digits}f}" if std is None else f"{mean:.{digits}f} ± {std:.{digits}f}"


def _fmt(value: Any, digits: int = 2) -> str | None:
    if value is None:
        return None
    if value == "inf":
        return "inf"
    return f"{value:.{digits}f}"


def _percent(share: float | None) -> str | None:
    return None if share is None else _fmt(100 * share)


def table_datasets(results: Results) -> str:
    """Table 1: our datasets' statistics next to the paper's."""
    rows = []
    for ds, st in results.datasets.items():
        paper = PAPER_DATASETS.get(PAPER_DATASET_OF.get(ds, ""), {})
        sizes = f"{paper['workers']} / {paper['items']} / {paper['labels']} / {paper['classes']}" if paper else None
        rows.append([
            ds, st["workers"], st["items"], st["labels"], st["classes"], st["gold_items"],
            _percent(st["mean_accuracy"]), _percent(st["best_accuracy_min_labels"]), PAPER_DATASET_OF.get(ds), sizes,
            _percent(paper.get("mean_accuracy")), _percent(paper.get("best_accuracy")),
        ])
    return markdown_table(
        ["dataset", "workers", "items", "labels", "classes", "gold items", "mean worker acc. %",
         f"best worker acc. % (>= {MIN_WORKER_LABELS} labels)", "paper's dataset",
         "paper: workers / items / labels / classes", "paper: mean acc. %", "paper: best acc. %"], rows)


def _method_by_dataset(results: Results, aggs: Mapping[str, Any], cell: Any, header: Any = str) -> str:
    """A table with a row per method and a column per dataset.

    ``cell(agg)`` formats one (dataset, method) aggregate, ``header(dataset)`` names its column.
    """
    datasets = list(results.datasets)
    rows = [[m] + [cell(aggs.get(ds, {}).get(m, {})) for ds in datasets] for m in results.method_keys()]
    return markdown_table(["method"] + [header(ds) for ds in datasets], rows)


def table_errors(results: Results, aggs: Mapping[str, Any]) -> str:
    """Table 2 (measured): error rate (%) mean ± sd per method (rows) and dataset (columns)."""
    return _method_by_dataset(results, aggs, lambda a: _pm(a.get("error_mean"), a.get("error_std")))


def table_paper_comparison(results: Results, aggs: Mapping[str, Any]) -> str:
    """Measured mean error next to the paper's Table 2 on the datasets the paper used."""
    pairs = [(ds, PAPER_DATASET_OF[ds]) for ds in results.datasets if ds in PAPER_DATASET_OF]
    header = ["method", "paper's row"]
    for ds, pname in pairs:
        header += [f"{ds} (ours)", f"{pname} (paper)"]
    rows = []
    for m in results.method_keys():
        alg = m.partition(PRESET_SEP)[0]
        row: list[Any] = [m, PAPER_METHOD_NAMES.get(alg)]
        for ds, pname in pairs:
            a = aggs.get(ds, {}).get(m, {})
            row += [_pm(a.get("error_mean"), a.get("error_std")), _fmt(PAPER_TABLE2.get(alg, {}).get(pname))]
        rows.append(row)
    return markdown_table(header, rows)


def table_paper_reference() -> str:
    """The paper's Table 2, as printed (error %, Heartdisease is private)."""
    datasets = list(PAPER_DATASETS)
    rows = [[PAPER_METHOD_NAMES[a]] + [_fmt(PAPER_TABLE2[a][d]) for d in datasets] for a in PAPER_TABLE2]
    return markdown_table(["method (paper)"] + datasets, rows)


def table_init(results: Results, aggs: Mapping[str, Any]) -> str:
    """Table 3: error with the paper's initialization vs random initialization, per dataset."""
    rows = []
    for ds in results.datasets:
        for key in aggs.get(ds, {}):
            alg, _, variant = key.partition(PRESET_SEP)
            if variant != RANDOM_INIT:
                continue
            init, rand = aggs[ds].get(alg, {}), aggs[ds][key]
            rows.append([ds, alg, _range_cell(init), _range_cell(rand)])
    for alg, row in PAPER_TABLE3.items():
        rows.append(["Heartdisease (paper)", alg, _fmt(100 * row["paper"], 1), _fmt(100 * row["random"], 1)])
    return markdown_table(["dataset", "model", "error % with initialization (4.4): mean ± sd [min, max]",
                           "error % without (init=random): mean ± sd [min, max]"], rows)


def _range_cell(row: Mapping[str, Any]) -> str | None:
    cell = _pm(row.get("error_mean"), row.get("error_std"))
    if cell is None or row.get("error_min") is None:
        return cell
    return f"{cell} [{row['error_min']:.2f}, {row['error_max']:.2f}]"


def table_levels(results: Results, aggs: Mapping[str, Any]) -> str:
    """Section 5.3.4: average labeling error of the easiest and hardest populated predicted level."""
    rows = []
    for ds in results.datasets:
        for key, row in aggs.get(ds, {}).items():
            lv = row.get("levels")
            if not has_levels(lv):
                continue
            rows.append([
                ds, key, ", ".join(str(h) for h in lv["n_levels"]), f"{lv['runs_with_two_levels']}/{lv['runs']}",
                _fmt(lv.get("easiest"), 3), _fmt(lv.get("hardest"), 3),
                f"{lv['easiest_items']:.0f} / {lv['hardest_items']:.0f}" if "easiest_items" in lv else None,
                ", ".join("-" if e is None else f"{e:.3f}" for e in lv["seed0"]["level_labeling_error"]),
                ", ".join(str(n) for n in lv["seed0"]["level_gold_items"]),
            ])
    for alg, row in PAPER_LEVEL_ERROR.items():
        rows.append(["Heartdisease (paper)", alg, None, None, _fmt(row["easiest"], 3), _fmt(row["hardest"], 3),
                     None, None, None])
    return markdown_table(
        ["dataset", "method", "H", "runs with >= 2 populated levels", "easiest level error", "hardest level error",
         "gold items easiest / hardest", "seed 0: error per level (0 = easiest)", "seed 0: gold items per level"],
        rows)


def table_nll(results: Results, aggs: Mapping[str, Any]) -> str:
    """Figure 3 in numbers: per-label paper NLL and the gold NLL, mean over runs."""

    def cell(a: Mapping[str, Any]) -> str | None:
        if a.get("paper_nll_mean") is None:
            return None
        return f"{_pm(a.get('paper_nll_mean'), None, 3)} / {_fmt(a.get('gold_nll_mean'), 3)}"

    return _method_by_dataset(results, aggs, cell, lambda ds: f"{ds}: paper NLL / gold NLL")


def table_time(results: Results, aggs: Mapping[str, Any]) -> str:
    """Mean seconds per run (wall clock of the whole fit, including validation) and mean iterations."""

    def cell(a: Mapping[str, Any]) -> str | None:
        if a.get("seconds_mean") is not None and a.get("iterations_mean") is not None:
            return f"{a['seconds_mean']:.2f} s ({a['iterations_mean']:.0f} it.)"
        return _fmt(a.get("seconds_mean"))

    return _method_by_dataset(results, aggs, cell)


def table_claims(claims: Sequence[Claim]) -> str:
    """The paper's claims with the run's verdict and evidence."""
    return markdown_table(["claim (paper)", "verdict", "criterion", "evidence (error % unless stated)"],
                          [[c.claim, f"**{c.verdict}**", c.criterion, c.evidence] for c in claims])


def _failures(aggs: Mapping[str, Any]) -> list[str]:
    return [f"- {ds} {m}: {row['failed']} failed runs: {'; '.join(row['failures'])}"
            for ds, rows in aggs.items() for m, row in rows.items() if row.get("failed")]


def _report_header(results: Results, command: str) -> list[str]:
    """The title, the command (and commit) that produced the report, and what was run."""
    cfg = results.config
    commit = results.meta.get("commit")
    produced = (f"Produced by `{command}`" + (f" at commit {commit}" if commit else "")) if command else ""
    quick = "; QUICK settings (short chains), not comparable with the paper" if cfg["quick"] else ""
    return [
        "# Reproduction of \"Generative Models for Learning from Crowds\" (IDBLA), section 5",
        "",
        produced,
        f"started {results.started}, {results.seconds:.0f} s; engine {cfg['engine']}; {cfg['runs']} runs per "
        f"method (seeds 0..{cfg['runs'] - 1}){quick}; "
        f"synthetic seed {cfg['synthetic_seed']}. Methods: `<algorithm>` = crowdspark defaults, `:paper` = "
        "`preset=\"paper\"`, `:random-init` = defaults with `init=\"random\"`. Every number below was measured by "
        "this run except the rows and columns marked *paper*, which are the paper's reported values.",
    ]


def render_report(results: Results, figures: Mapping[str, str], command: str = "") -> str:
    """The full ``report.md`` text.

    Parameters
    ----------
    results : Results
    figures : mapping
        Figure title -> file name (relative to the report).
    command : str
        The command that produced the report (printed at the top).
    """
    aggs = aggregate_records(results.records)
    parts = [
        *_report_header(results, command),
        "",
        "## Datasets (Table 1)",
        table_datasets(results),
        "",
        "## Error rates, % (Table 2): mean ± sd over runs",
        table_errors(results, aggs),
        "",
        "### Next to the paper (Web Search = web_search_filtered)",
        table_paper_comparison(results, aggs) if any(ds in PAPER_DATASET_OF for ds in results.datasets)
        else "(none of the paper's datasets in this run)",
        "",
        "### The paper's Table 2 (reference)",
        table_paper_reference(),
        "",
        "## The paper's claims, checked",
        table_claims(check_claims(results)),
        "",
        "## Initialization ablation (Table 3), error %",
        table_init(results, aggs),
        "",
        "## Average labeling error per predicted difficulty level (section 5.3.4)",
        "Labeling error of an item = share of its labels that differ from its gold label; averaged over the "
        "gold items of each predicted level (level 0 = easiest). Easiest/hardest = lowest/highest level that "
        "holds gold items, averaged over the runs where at least two levels hold gold items.",
        "",
        table_levels(results, aggs),
        "",
        "## Negative log-likelihood (Figure 3)",
        "paper NLL = -log p(L | pi, T, Q) / number of labels, with T, Q the predicted labels and levels and pi "
        "the fitted worker tables (`inf` when a label has probability 0 under them); gold NLL = `metrics.nll`, "
        "mean over gold items of -log posterior(gold label). Means over runs.",
        "",
        table_nll(results, aggs),
        "",
        "## Run time per method (mean seconds per run, mean iterations)",
        table_time(results, aggs),
        "",
        "## Figures",
    ]
    parts += [f"### {title}\n![{title}]({name})\n" for title, name in figures.items()] or ["(none)"]
    failures = _failures(aggs)
    if failures:
        parts += ["", "## Failed runs", *failures]
    return "\n".join(parts) + "\n"


def summary_markdown(results: Results) -> str:
    """The part of the report meant for the README: command, Table 2, the paper comparison and the claims."""
    aggs = aggregate_records(results.records)
    cfg = results.config
    command = results.meta.get("command", "")
    commit = results.meta.get("commit")
    return "\n".join([
        f"Command: `{command}`" + (f" (commit {commit})" if commit else ""),
        f"Run {results.started}, {results.seconds / 60:.0f} min, {cfg['runs']} runs per method, engine {cfg['engine']}"
        + (", QUICK settings" if cfg["quick"] else "") + ".",
        "",
        "Error rate, % (mean ± sd over runs):",
        "",
        table_errors(results, aggs),
        "",
        "Next to the paper's Table 2 (Web Search = web_search_filtered):",
        "",
        table_paper_comparison(results, aggs),
        "",
        "The paper's claims, checked by the run:",
        "",
        table_claims(check_claims(results)),
    ])
