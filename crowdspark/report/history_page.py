"""The history page of a run root: one self-contained HTML document (inline CSS and SVG, no script, no network),
night by night, with the nights that drift flagged (:mod:`crowdspark.report.history`)."""

from __future__ import annotations

import html
from typing import Any

import numpy as np
import pandas as pd

from crowdspark.report import figures, generator_meta
from crowdspark.report.history import (
    DRIFT_FLOORS,
    DRIFT_K,
    DRIFT_MIN_NIGHTS,
    DRIFT_WINDOW,
    History,
)
from crowdspark.report.page import MEANINGS, STYLE, figure, note, table

__all__ = ["HISTORY_SECTIONS", "render_history", "history_figures"]

#: (id, heading) of the history page's sections, in order
HISTORY_SECTIONS = (
    ("nights", "Nights"),
    ("drift", "Drift"),
    ("error", "Error against gold"),
    ("agreement", "Agreement of the crowd"),
    ("queue", "Spammers and items awaiting relabel"),
    ("workers", "Prolific workers"),
    ("table", "Night by night"),
)


def history_figures(history: History) -> dict[str, Any]:
    """The history's figures by name (:class:`crowdspark.report.svg.Figure`)."""
    nights, drift = history.nights, history.drift
    out: dict[str, Any] = {}
    if nights["error_rate"].notna().any():
        out["error"] = figures.series(nights, ["error_rate"], "error rate on held-out gold", drift)
    if nights["krippendorff_alpha"].notna().any():
        out["agreement"] = figures.series(nights, ["krippendorff_alpha"], "Krippendorff's alpha", drift)
    counted = [c for c in ("spammers", "relabel") if nights[c].notna().any()]
    if counted:
        out["queue"] = figures.series(nights, counted, "workers / items")
    if len(history.workers.columns):
        out["workers"] = figures.series(history.workers, list(history.workers.columns), "estimated accuracy",
                                        drift)
    return out


def _flagged(history: History) -> pd.DataFrame:
    """One row per (night, series) flagged: the value, the trailing median it moved from."""
    rows = []
    values = history.nights[["error_rate", "krippendorff_alpha"]].join(history.workers)
    for column in history.drift.columns:
        for position, run_id in enumerate(history.drift.index):
            if not history.drift[column].iloc[position]:
                continue
            past = values[column].iloc[max(0, position - DRIFT_WINDOW):position].dropna()
            what = column if column in ("error_rate", "krippendorff_alpha") else f"accuracy of worker {column}"
            rows.append({"night": run_id, "series": what, "value": values[column].iloc[position],
                         "trailing median": float(np.median(past))})
    return pd.DataFrame(rows, columns=["night", "series", "value", "trailing median"])


def _drift_section(history: History) -> str:
    rule = (f"A night is flagged when its value lies more than max({DRIFT_K:g} s, a floor) from the median of the "
            f"same series over the {DRIFT_WINDOW} nights before it, where s is the noise of those nights about their "
            "own trend (1.4826 times the median absolute residual about their Theil-Sen line): a jump, and a steady "
            "trend once it leaves the trailing median by the floor, are both flagged. A night is judged once "
            f"{DRIFT_MIN_NIGHTS} nights before it have the value. Floors: error rate "
            f"{DRIFT_FLOORS['error_rate']:g}, alpha {DRIFT_FLOORS['krippendorff_alpha']:g}, a worker's accuracy "
            f"{DRIFT_FLOORS['worker']:g}. The threshold comes from each series' own noise and these fixed floors, "
            "never from the gold.")
    flagged = _flagged(history)
    if not len(flagged):
        return f"<p>{html.escape(rule)}</p><p>No night drifts.</p>"
    return (f"<p>{html.escape(rule)}</p><p class=\"flag\">{len(flagged):,} flagged value(s):</p>"
            f'<div class="scroll">{table(flagged)}</div>')


def _series_section(svgs: dict[str, str], name: str, caption: str, missing: str) -> str:
    return figure(svgs[name], caption) if name in svgs else note(missing)


def _nights_section(history: History) -> str:
    nights = history.nights
    if not len(nights):
        return note(f"{history.root} holds no committed night (run_id=*/ with summary.json)")
    first, last = nights.index[0], nights.index[-1]
    body = (f"<p class=\"headline\">{len(nights):,} nights, from {html.escape(figures.visible(first))} to "
            f"{html.escape(figures.visible(last))}; latest: {html.escape(str(nights['algorithm'].iloc[-1]))} on "
            f"{int(np.nan_to_num(nights['items'].iloc[-1])):,} items</p>")
    flagged = history.drift.iloc[-1]
    if flagged.any():
        body += f'<p class="flag">The latest night drifts in: {html.escape(", ".join(flagged[flagged].index))}</p>'
    body += "".join(note(f"skipped {s}") for s in history.skipped)
    return body


def _table_section(history: History) -> str:
    frame = history.nights.copy()
    marks = history.drift.apply(lambda row: ", ".join(str(c) for c in row.index[row.to_numpy(dtype=bool)]), axis=1)
    frame["drifts in"] = marks.reindex(frame.index).fillna("")
    frame = frame.reset_index().rename(columns={"run_id": "night", "relabel": "awaiting relabel",
                                                "krippendorff_alpha": "alpha"})
    return f'<div class="scroll">{table(frame.iloc[::-1])}</div>'


def render_history(history: History) -> str:
    """The whole history page."""
    svgs = {name: fig.svg() for name, fig in history_figures(history).items()}
    alpha = MEANINGS["krippendorff_alpha"]
    bodies = {
        "nights": _nights_section(history),
        "drift": _drift_section(history),
        "error": _series_section(svgs, "error", f"{MEANINGS['error_rate'][0]}; drifting nights ringed in red",
                                 "no night was run with --gold, so there is no error against gold"),
        "agreement": _series_section(svgs, "agreement", f"{alpha[0]}. A good value: {alpha[1]}",
                                     "no night computed quality statistics (quality.enabled = false, or nights "
                                     "without new labels), so there is no alpha"),
        "queue": _series_section(svgs, "queue", "workers flagged spammer, and rows of the night's relabel queue "
                                                "(at most relabel.budget)",
                                 "no night flagged spammers or wrote a relabel queue"),
        "workers": _series_section(svgs, "workers", f"the estimated accuracy of the {len(history.workers.columns)} "
                                                    "workers with most labels in the latest night; drifting nights "
                                                    "ringed in red", "no night wrote a workers/ table"),
        "table": _table_section(history) if len(history.nights) else note("no night"),
    }
    title = f"crowdspark history of {figures.visible(history.root)}"
    nav = "".join(f'<a href="#{sid}">{html.escape(head)}</a>' for sid, head in HISTORY_SECTIONS)
    sections = "".join(f'<section id="{sid}"><h2>{html.escape(head)}</h2>{bodies[sid]}</section>'
                       for sid, head in HISTORY_SECTIONS)
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{generator_meta()}"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{html.escape(title)}"
            f"</title><style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1><nav>{nav}</nav>{sections}"
            "</body></html>\n")
