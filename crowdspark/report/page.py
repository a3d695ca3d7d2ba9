"""The report page: one HTML document with inline CSS and inline SVG figures, no script, no network.

Every section is always present; a section whose data the run lacks says what is missing and how to get it.
"""

from __future__ import annotations

import html
import json
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.report import figures, generator_meta
from crowdspark.report.facts import Histogram, RunFacts, flag_columns, worker_matrices

__all__ = ["SECTIONS", "MEANINGS", "render", "build_figures", "crowd_matrix", "STYLE", "table", "note", "figure"]

#: (id, heading) of the page's sections, in order
SECTIONS = (
    ("run", "Run"),
    ("convergence", "Convergence"),
    ("confidence", "Confidence of the inferred labels"),
    ("workers", "Workers"),
    ("confusion", "Confusion matrix of the crowd"),
    ("calibration", "Calibration against gold"),
    ("classes", "Accuracy per class against gold"),
    ("levels", "Difficulty levels"),
    ("changes", "Changes since the previous run"),
    ("quality", "Quality statistics"),
)

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2em auto;max-width:1000px;color:#222;
line-height:1.45;padding:0 1em}
h1{font-size:1.6em;margin-bottom:.2em}h2{border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}td,th{border:1px solid #ddd;padding:.25em .6em;
text-align:right;overflow-wrap:anywhere;unicode-bidi:isolate}.scroll{max-height:24em;overflow:auto}.meaning td{text-align:left}
.flag{color:#b00020;font-weight:600}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.note{background:#fff8e1;border-left:4px solid #f0b400;padding:.5em .8em}figure{margin:1em 0}
figure svg{max-width:100%;height:auto}.headline{font-size:1.1em;font-weight:600}summary{cursor:pointer}figcaption{font-size:.9em;color:#555}nav a{margin-right:.8em}
"""

#: what a quality statistic (a ``summary.json`` key, an ``items/`` or ``workers/`` column) means, and what a
#: good value is; ``{ln_c}`` is the natural log of the number of classes (docs/quality.md has the definitions)
MEANINGS: dict[str, tuple[str, str]] = {
    "krippendorff_alpha": ("how much the labels of one item agree beyond chance (Krippendorff's alpha, nominal): "
                           "1 every pair agrees, 0 no more than chance, below 0 less than chance",
                           "0.8 or more is reliable coding and 0.667 tentative (Krippendorff); a crowd of noisy "
                           "workers often sits between 0.2 and 0.5 and its aggregate can still be right: read "
                           "it with the error against gold"),
    "class_agreement": ("for one class: of the pairs of labels of one item whose first is the class, the share "
                        "whose second is too", "near 1; a class far below the others is one the crowd confuses "
                        "(see the confusion matrices)"),
    "paired_labels": ("labels of the items with two labels or more (what alpha is computed on)",
                      "most of the labels"),
    "workers.spammer_threshold": ("a worker whose spammer probability is above this is flagged spammer",
                                  "set by quality.spammer_threshold (0.5: more likely a spammer than not)"),
    "workers.scored": ("workers with a spammer probability (some labels on items of two classes or more)",
                       "nearly every worker"),
    "workers.spammers": ("workers flagged spammer", "few; the models already weigh their labels down, but they "
                                                    "cost money"),
    "workers.spammer_labels": ("labels given by the flagged workers", "a small share of the labels"),
    "workers.mean_agreement": ("share of the labels equal to their item's inferred label, over all labels",
                               "well above 1/C (chance); 1 when every label agrees with the answer"),
    "workers.mean_spammer_score": ("Raykar & Yu's spammer score averaged over labels: 1 a perfect worker, 0 "
                                   "labels that do not depend on the true class",
                                   "near 1; it is estimated without the bias of few labels, so a worker with "
                                   "few labels can score below 0 (to about -0.3): read that as 0"),
    "relabel.budget": ("rows of the relabel queue (relabel/)", "what the team can relabel before the next run"),
    "relabel.order": ("how the relabel queue is ordered", "-"),
    "vote_entropy": ("entropy (nats) of the item's label shares: 0 when all its labels agree, {ln_c} when they "
                     "spread evenly over the classes", "most items near 0; a hump near ln 2 = 0.69 is items "
                     "split between two classes"),
    "posterior_entropy": ("entropy (nats) of the item's posterior: 0 certain, {ln_c} no idea",
                          "most items near 0"),
    "agreement": ("share of the labels equal to the inferred label (of an item, or of a worker's labels)",
                  "near 1; 1/C is chance"),
    "relabel_gain": ("how much one more label is expected to lower the chance that the item's label is wrong",
                     "most items near 0; the items with most gain are the ones to relabel"),
    "margin": ("gap between the item's two most probable classes: 1 certain, 0 a tie",
               "most items near 1; the relabel queue takes the smallest first"),
    "n_labels": ("labels of the item", "the labels per item the task was designed for"),
    "spammer_score": ("Raykar & Yu's score of the worker's confusion matrix: 1 perfect (or consistently "
                      "permuted), 0 labels that do not depend on the true class",
                      "near 1; few labels can give values below 0 (to about -0.3): read those as 0"),
    "spammer_probability": ("posterior probability that the worker agrees with the answers only at chance rate",
                            "near 0; above quality.spammer_threshold the worker is flagged spammer"),
    "error_rate": ("share of the held-out gold items whose inferred label is wrong", "as low as the task allows"),
    "ece": ("expected calibration error: the gap between confidence and accuracy on gold, averaged over items",
            "0 is perfect; below 0.05 the confidences can be read as probabilities"),
}


def meaning(name: str, n_classes: int) -> tuple[str, str] | None:
    """What the statistic ``name`` means and what a good value is (:data:`MEANINGS`; a ``class_agreement.<c>``
    key reads ``class_agreement``), or ``None`` when the page knows nothing of it."""
    found = MEANINGS.get(name) or MEANINGS.get(name.split(".", 1)[0] if name.startswith("class_agreement.") else "")
    if found is None:
        return None
    ln_c = f"ln {n_classes} = {np.log(max(n_classes, 2)):.2f}"
    return found[0].replace("{ln_c}", ln_c), found[1]


_KNOWN_ITEM = ("confidence", "level", "epsilon")
_KNOWN_WORKER = ("n_labels", "accuracy")


def _fmt(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return str(bool(value)).lower()
    if isinstance(value, (float, np.floating)):
        return "" if np.isnan(value) else f"{value:.4g}"
    if isinstance(value, (int, np.integer)):
        return f"{int(value):,}"
    if isinstance(value, (list, dict)):
        return json.dumps(value, default=str)[:200]
    return "" if value is None else str(value)


def _text(value: Any) -> str:
    """A value as HTML text: escaped, bidirectional controls shown as codes (:func:`figures.visible`)."""
    return html.escape(figures.visible(_fmt(value)))


def table(frame: pd.DataFrame, css: str = "") -> str:
    """``frame`` as an HTML table of text (every value escaped)."""
    head = "".join(f"<th>{_text(c)}</th>" for c in frame.columns)
    rows = "".join("<tr>" + "".join(f"<td>{_text(v)}</td>" for v in row) + "</tr>"
                   for row in frame.itertuples(index=False))
    attribute = f' class="{css}"' if css else ""
    return f"<table{attribute}><tr>{head}</tr>{rows}</table>"


def _pairs(pairs: list[tuple[str, Any]]) -> str:
    return table(pd.DataFrame(pairs, columns=["", "value"])) if pairs else ""


def note(text: str) -> str:
    return f'<p class="note">{_text(text)}</p>'


def figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{_text(caption)}</figcaption></figure>"



def crowd_matrix(workers: pd.DataFrame, n_classes: int) -> np.ndarray:
    """The workers' confusion matrices averaged with their numbers of labels as weights, shape (C, C).

    A row a worker's matrix leaves undefined (NaN: a majority vote's class the worker never saw) is left out of
    that row's average.
    """
    matrices = worker_matrices(workers, n_classes)
    weights = workers["n_labels"].to_numpy(dtype=float)[:, None] * np.isfinite(matrices).all(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.einsum("kt,ktl->tl", weights, np.nan_to_num(matrices)) / weights.sum(axis=0)[:, None]


def build_figures(facts: RunFacts) -> dict[str, Any]:
    """Every figure the run's data allows, by name (:class:`crowdspark.report.svg.Figure`, not yet rendered)."""
    summary, items, workers = facts.summary, facts.items, facts.workers
    out: dict[str, Any] = {}
    if summary.get("history"):
        out["convergence"] = figures.convergence(summary["history"], summary.get("parameters", {}).get("tol"))
    if "confidence" in items.histograms:
        out["confidence"] = figures.histogram(items.histograms["confidence"], "confidence (posterior of the label)",
                                              "items")
    if workers is not None and len(workers):
        out["worker_accuracy"] = figures.worker_accuracy(workers)
        out["labels_per_worker"] = figures.labels_per_worker(workers)
        out["worker_scatter"] = figures.worker_scatter(workers, flag_columns(workers))
        if facts.worker_gold is not None and len(facts.worker_gold.drawn):
            out["worker_gold"] = figures.worker_gold_scatter(facts.worker_gold.drawn)
        classes = [str(c) for c in summary["classes"]]
        if len(facts.spotlight):
            matrices = worker_matrices(workers.iloc[facts.spotlight["row"].to_numpy()], len(classes))
            titles = [f"{w} ({why})" for w, why in zip(facts.spotlight["worker"], facts.spotlight["why"])]
            out["worker_confusions"] = figures.worker_confusions(matrices, titles, classes)
        out["confusion"] = figures.crowd_confusion(crowd_matrix(workers, len(classes)), classes)
    if facts.gold is not None:
        with np.errstate(invalid="ignore", divide="ignore"):
            rows = facts.gold.counts / facts.gold.counts.sum(axis=1, keepdims=True)
        out["gold_confusion"] = figures.crowd_confusion(np.nan_to_num(rows), facts.gold.classes,
                                                        "label inferred by the run", "true class (gold)",
                                                        "share of the class's gold items")
    if facts.calibration is not None:
        out["calibration"] = figures.reliability(facts.calibration)
    if n_levels(facts) > 1:
        out.update(_level_figures(facts))
    for column in _other_item_columns(facts):
        out[f"item_{column}"] = figures.histogram(items.histograms[column], column, "items")
    for column in _other_worker_columns(facts):
        values = workers[column].to_numpy(dtype=float)
        counts, edges = np.histogram(values[np.isfinite(values)], bins=20)
        out[f"worker_{column}"] = figures.histogram(Histogram(edges, counts), column, "workers", ylabel="workers")
    if facts.changes is not None and facts.changes.worker_deltas.size:
        out["accuracy_changes"] = figures.accuracy_changes(facts.changes.worker_deltas)
    return out


_ITEM_AXIS = {"level": "difficulty level (0 = easiest)", "epsilon": "item difficulty epsilon (initialization)"}


def n_levels(facts: RunFacts) -> int:
    """The number of difficulty levels of the run's model (0: it has none)."""
    workers = facts.workers
    if workers is not None and len(workers) and "level_accuracy" in workers:
        return len(workers["level_accuracy"].iloc[0])
    level = facts.items.histograms.get("level")
    return int(round(level.edges[-1] + 0.5)) if level is not None else 0


def _level_figures(facts: RunFacts) -> dict[str, Any]:
    out: dict[str, Any] = {}
    workers = facts.workers
    if workers is not None and "level_accuracy" in workers:
        per_level = np.stack([np.asarray(v, dtype=float) for v in workers["level_accuracy"]])
        out["level_accuracy"] = figures.level_accuracy(per_level)
    for column in ("level", "epsilon"):
        if column in facts.items.histograms:
            out[column] = figures.histogram(facts.items.histograms[column], _ITEM_AXIS[column], "items")
    return out


def _other_item_columns(facts: RunFacts) -> list[str]:
    return [c for c in facts.items.histograms if c not in _KNOWN_ITEM]


def _other_worker_columns(facts: RunFacts) -> list[str]:
    workers = facts.workers
    if workers is None or not len(workers):
        return []
    return [c for c in workers.columns if c not in _KNOWN_WORKER and workers[c].dtype.kind in "fi"
            and np.isfinite(workers[c].to_numpy(dtype=float)).any()]


def _headline(s: dict[str, Any]) -> str:
    counts = s.get("counts", {})
    parts = [f"{s.get('algorithm')} on {s.get('engine')}", f"{counts.get('items', 0):,} items",
             f"{counts.get('workers', 0):,} workers", f"{counts.get('labels', 0):,} labels"]
    if s.get("converged") is None:
        parts.append(f"{s.get('iterations')} sweeps")
    else:
        parts.append(f"{s.get('iterations')} iterations ({'converged' if s['converged'] else 'not converged'})")
    metrics = s.get("metrics") or {}
    if metrics.get("error_rate") is not None:
        parts.append(f"error rate {metrics['error_rate']:.4f} on {metrics.get('n_gold', 0):,} held-out gold items")
    return f"<p class=\"headline\">{html.escape(' · '.join(parts))}</p>"


def _run_section(facts: RunFacts) -> str:
    s = facts.summary
    inputs = s.get("inputs", {})
    pairs = [("algorithm", s.get("algorithm")), ("engine", s.get("engine")), ("seed", s.get("seed")),
             ("crowdspark version", s.get("version")), ("run id", inputs.get("run_id")),
             ("as of", inputs.get("as_of")), ("labels", inputs.get("labels")), ("gold", inputs.get("gold")),
             ("iterations", s.get("iterations")), ("converged", s.get("converged")),
             ("stop reason", s.get("stop_reason"))]
    pairs += [(f"counts: {k}", v) for k, v in s.get("counts", {}).items()]
    pairs += [(f"metrics: {k}", v) for k, v in s.get("metrics", {}).items()]
    pairs += [(f"parameter: {k}", v) for k, v in s.get("parameters", {}).items()]
    pairs += [(f"seconds: {k}", v) for k, v in s.get("timings", {}).items()]
    warnings = "".join(note(f"warning: {w}") for w in s.get("warnings", []))
    if s.get("items_scope", "all").split(":")[0] != "all":
        warnings += note(f"items: {s['items_scope']}. The item figures of this page show those items only.")
    listed = _pairs([(k, v) for k, v in pairs if v is not None])
    return (f"{_headline(s)}{warnings}<details><summary>Settings, counts, metrics and timings</summary>{listed}"
            "</details>")


def _convergence_section(facts: RunFacts, svgs: dict[str, str]) -> str:
    s = facts.summary
    if "convergence" in svgs:
        body = figure(svgs["convergence"], f"{s.get('algorithm')}: {len(s['history'])} iterations; "
                                            f"{s.get('stop_reason') or ''}")
    else:
        body = note(f"{s.get('algorithm')} records no iterations (a one-pass algorithm, or a run that carried the "
                     "previous result forward), so there is no convergence to draw")
    selection = s.get("level_selection")
    if selection and selection.get("table"):
        columns = [c for c in ("n_levels", "log_evidence", "n_params", "aic", "bic", "icl", "n_iter", "converged")
                   if c in selection["table"][0]]
        body += (f"<p>Number of levels chosen by {html.escape(str(selection.get('criterion')))}: "
                 f"{html.escape(str(selection.get('chosen')))}</p>" + table(pd.DataFrame(selection["table"])[columns]))
    return body


def _confidence_section(facts: RunFacts, svgs: dict[str, str]) -> str:
    items = facts.items
    if not items.n:
        return note("this run wrote no items/ table")
    body = figure(svgs["confidence"], f"{items.n:,} items") if "confidence" in svgs else note(
        "items/ has no confidence column")
    counts = items.label_counts.sort_values(ascending=False)
    frame = pd.DataFrame({"inferred label": counts.index, "items": counts.to_numpy(),
                          "share": counts.to_numpy() / max(items.n, 1)})
    return body + table(frame)


#: flagged workers listed on the page at most (the table scrolls); the rest are counted
FLAGGED_ROWS = 5000


def _workers_section(facts: RunFacts, svgs: dict[str, str]) -> str:
    workers = facts.workers
    if workers is None or not len(workers):
        return note("this run wrote no workers/ table")
    body = figure(svgs["worker_accuracy"], "estimated accuracy: the workers' confusion matrices on the inferred "
                                           "class proportions (1 always right; 1/C is a worker who guesses)")
    body += figure(svgs["labels_per_worker"], f"{len(workers):,} workers, {int(workers['n_labels'].sum()):,} labels")
    body += figure(svgs["worker_scatter"], "each worker's estimated accuracy against its labels: a prolific worker "
                                           "low on the chart costs most; with few labels the estimate is close "
                                           "to the prior")
    body += _worker_gold_part(facts, svgs)
    if "worker_confusions" in svgs:
        chosen = facts.spotlight
        body += ("<p>The workers that matter, each with its own confusion matrix (the crowd's matrix below averages "
                 "them by labels, so a worker biased towards one class vanishes in it):</p>")
        body += figure(svgs["worker_confusions"], "rows: true class (inferred), columns: label the worker gave")
        shown = [c for c in ("worker", "n_labels", "accuracy") if c in workers]
        rows = workers.iloc[chosen["row"].to_numpy()][shown].reset_index(drop=True)
        body += table(rows.assign(why=chosen["why"].to_numpy()))
    for column in flag_columns(workers):
        flagged = workers[workers[column]].sort_values("n_labels", ascending=False)
        body += f"<p>{_text(column)}: {len(flagged):,} of {len(workers):,} workers"
        body += (f", the {FLAGGED_ROWS:,} with most labels listed" if len(flagged) > FLAGGED_ROWS else
                 (", all listed, most labels first" if len(flagged) else "")) + "</p>"
        shown = [c for c in ("worker", "n_labels", "accuracy", "spammer_probability", "spammer_score")
                 if c in workers]
        if len(flagged):
            body += f'<div class="scroll">{table(flagged[shown].head(FLAGGED_ROWS))}</div>'
    lowest = workers[workers["n_labels"] >= workers["n_labels"].median()].nsmallest(10, "accuracy")
    body += "<p>Lowest estimated accuracy among the workers with at least the median number of labels:</p>"
    return body + table(lowest[["worker", "n_labels", "accuracy"]])


#: workers listed whose estimated accuracy is farthest from their accuracy on gold
GOLD_GAP_ROWS = 10


def _worker_gold_part(facts: RunFacts, svgs: dict[str, str]) -> str:
    """The scatter of estimated accuracy against accuracy on held-out gold (runs with gold), and the workers
    farthest from the diagonal."""
    found = facts.worker_gold
    if found is None:
        return note(facts.worker_gold_note) if facts.worker_gold_note else ""
    drawn = found.drawn
    counted = (f"{len(drawn):,} workers with at least {found.min_labels} labels on held-out gold items drawn; "
               f"{found.left_out:,} with 1 to {found.min_labels - 1} left out (too few to compare)")
    if "worker_gold" not in svgs:
        return f"<p>Estimated accuracy against accuracy on gold: {_text(counted)}.</p>"
    body = figure(svgs["worker_gold"], f"each worker's estimated accuracy against the share of its labels on "
                                       f"held-out gold items that are right (the gold of its items); {counted}. On "
                                       "the diagonal the run's estimate agrees with the gold; above it the run "
                                       "trusts the worker more than the gold does")
    gap = drawn.assign(gap=drawn["accuracy"] - drawn["gold_accuracy"])
    gap = gap.loc[gap["gap"].abs().nlargest(GOLD_GAP_ROWS).index]
    body += ("<p>Workers whose estimated accuracy is farthest from their accuracy on gold (estimate less gold):"
             "</p>")
    return body + table(gap[["worker", "n_labels", "gold_labels", "accuracy", "gold_accuracy", "gap"]])


def _confusion_section(facts: RunFacts, svgs: dict[str, str]) -> str:
    if "confusion" not in svgs:
        return note("this run wrote no workers/ table, so there is no confusion matrix")
    how = ("the workers' confusion matrices" if "confusion" in facts.workers else
           f"the one-coin matrices of the workers' accuracies ({facts.summary.get('algorithm')} gives each worker "
           "one number)")
    return figure(svgs["confusion"], f"{how} averaged with their numbers of labels as weights: how often a label "
                                      "of the crowd is each class, given the true class")


def _calibration_section(facts: RunFacts, svgs: dict[str, str]) -> str:
    cal = facts.calibration
    if cal is None:
        return note(facts.calibration_note)
    split = facts.summary.get("gold_split", {})
    held = " (the held-out gold: the gold items in the fit are left out)" if split.get("fit_items") else ""
    return (figure(svgs["calibration"], f"expected calibration error {cal.ece:.4f} on {cal.n:,} gold items{held}; "
                                        f"{cal.source}. {MEANINGS['ece'][0]}; {MEANINGS['ece'][1]}")
            + table(cal.table))


def _classes_section(facts: RunFacts, svgs: dict[str, str]) -> str:
    gold = facts.gold
    if gold is None:
        return note(facts.calibration_note)
    return (f"<p>{gold.n:,} held-out gold items. Accuracy is the share of a class's gold items the run labels "
            "right; precision the share of the gold items labelled the class that are truly of it.</p>"
            + table(gold.table())
            + figure(svgs["gold_confusion"], "the run's labels against the gold: each row is a true class and "
                                             "sums to 1 (the diagonal is the class's accuracy)"))


def _levels_section(facts: RunFacts, svgs: dict[str, str]) -> str:
    parts = [figure(svgs[name], caption) for name, caption in (
        ("level", "items per difficulty level (the most probable level of each item)"),
        ("level_accuracy", "each worker's estimated accuracy on each level"),
        ("epsilon", "the items' difficulty epsilon of the initialization")) if name in svgs]
    algorithm = facts.summary.get("algorithm")
    if n_levels(facts) == 1:
        return note(f"{algorithm} fitted one difficulty level in this run: every item is as difficult as any "
                     "other (dds chooses the number of levels by BIC; idbla takes n_levels)")
    if not parts:
        return note(f"{algorithm} has no difficulty levels (dds, idbla, fixed-idbla and idbla-cvb have them)")
    metrics = facts.summary.get("metrics", {})
    if "level_labeling_error" in metrics:
        parts.append(table(pd.DataFrame({"level": range(len(metrics["level_labeling_error"])),
                                          "gold items": metrics.get("level_gold_items"),
                                          "labelling error on gold": metrics["level_labeling_error"]})))
    return "".join(parts)


def _changes_section(facts: RunFacts, svgs: dict[str, str]) -> str:
    c = facts.changes
    if c is None:
        return note(facts.changes_note)
    body = f"<p>Compared with the previous run at {html.escape(c.previous)}.</p>"
    body += _pairs([("items in both runs", c.items_shared), ("items whose label flipped", c.n_flipped),
                    ("new items", c.items_new), ("items no longer present", c.items_gone),
                    ("workers in both runs", c.worker_deltas.size), ("new workers", c.workers_new),
                    ("workers no longer present", c.workers_gone)])
    if "accuracy_changes" in svgs:
        body += figure(svgs["accuracy_changes"], "change of each worker's estimated accuracy")
        body += "<p>Workers whose estimated accuracy moved most:</p>" + table(c.workers)
    if c.n_flipped:
        body += "<p>Flipped labels (rows: label before, columns: label now):</p>"
        body += table(c.flips.rename_axis(None, axis=1).reset_index().rename(columns={"label_before": "before"}))
        body += "<p>Flipped items, most confident first:</p>" + table(c.flipped)
    return body


def _flatten(prefix: str, value: Any, pairs: list[tuple[str, Any]], tables: list[tuple[str, pd.DataFrame]]) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, pairs, tables)
    elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        tables.append((prefix, pd.DataFrame(value)))
    else:
        pairs.append((prefix, value))


def _explained(pairs: list[tuple[str, Any]], n_classes: int) -> str:
    """The statistics ``pairs`` as a table with what each means and what a good value is."""
    rows = [(name, value, *(meaning(name, n_classes) or ("", ""))) for name, value in pairs]
    return table(pd.DataFrame(rows, columns=["statistic", "value", "what it means", "a good value"]), "meaning")


def _column_caption(table_name: str, column: str, n_classes: int) -> str:
    explained = meaning(column, n_classes)
    if explained is None:
        return f"{table_name} column {column}"
    return f"{table_name} column {column}: {explained[0]}. A good value: {explained[1]}"


def _quality_section(facts: RunFacts, svgs: dict[str, str]) -> str:
    quality = facts.summary.get("quality")
    n_classes = len(facts.summary.get("classes", [])) or 2
    body = ""
    if quality:
        pairs: list[tuple[str, Any]] = []
        tables: list[tuple[str, pd.DataFrame]] = []
        _flatten("", {k: v for k, v in quality.items() if k != "calibration"}, pairs, tables)
        body += _explained(pairs, n_classes) + "".join(f"<p>{_text(name)}:</p>{table(t)}" for name, t in tables)
    else:
        body += note('summary.json has no "quality" section: this run computed no agreement, spammer or '
                     "calibration statistics")
    body += "".join(figure(svgs[f"item_{c}"], _column_caption("items/", c, n_classes))
                    for c in _other_item_columns(facts))
    body += "".join(figure(svgs[f"worker_{c}"], _column_caption("workers/", c, n_classes))
                    for c in _other_worker_columns(facts))
    if facts.relabel is not None:
        order = "by rank" if "rank" in facts.relabel else "as written"
        body += f"<p>The relabel queue (relabel/), first rows {order}:</p>" + table(facts.relabel)
    else:
        body += note("this run wrote no relabel/ queue")
    return body


_RENDER = {"convergence": _convergence_section, "confidence": _confidence_section, "workers": _workers_section,
           "confusion": _confusion_section, "calibration": _calibration_section,
           "classes": _classes_section, "levels": _levels_section,
           "changes": _changes_section, "quality": _quality_section}


def render(facts: RunFacts) -> str:
    """The whole page for ``facts``."""
    svgs = {name: fig.svg() for name, fig in build_figures(facts).items()}
    s = facts.summary
    title = f"crowdspark run report: {s.get('algorithm')} on {s.get('counts', {}).get('items', 0):,} items"
    nav = "".join(f'<a href="#{sid}">{html.escape(head)}</a>' for sid, head in SECTIONS)
    sections = [f'<section id="run"><h2>Run</h2>{_run_section(facts)}</section>']
    sections += [f'<section id="{sid}"><h2>{html.escape(head)}</h2>{_RENDER[sid](facts, svgs)}</section>'
                 for sid, head in SECTIONS[1:]]
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{generator_meta()}"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{html.escape(title)}"
            f"</title><style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{html.escape(facts.run_dir)}</p><nav>{nav}</nav>{''.join(sections)}</body></html>\n")
