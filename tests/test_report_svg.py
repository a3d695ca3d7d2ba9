"""The report's SVG plotting layer (crowdspark/report/svg.py): ticks, ranges, escaping, and figures drawn from
empty, missing, single and all-equal data."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from crowdspark.report import figures
from crowdspark.report.facts import Histogram
from crowdspark.report.svg import (BLUES, ColourBar, Figure, Panel, colour_at, escape, log_ticks, nice_ticks, span,
                                   tick_text, visible)


def _parse(svg: str) -> ET.Element:
    """The figure as XML: it must be well-formed on its own (an HTML parser would forgive what XML does not)."""
    return ET.fromstring(svg)


def _texts(svg: str) -> list[str]:
    return ["".join(t.itertext()) for t in _parse(svg).iter("text")]


def _titles(svg: str) -> list[str]:
    return ["".join(t.itertext()) for t in _parse(svg).iter("title")]


@pytest.mark.parametrize("low, high", [(0, 1), (0, 1.02), (-0.02, 1.02), (3, 97), (107.5, 108.5), (-1e-3, 1e-3),
                                       (1e5, 3.2e6), (-17, -3)])
def test_nice_ticks_are_round_evenly_spaced_and_inside(low, high):
    ticks = nice_ticks(low, high)
    assert 3 <= len(ticks) <= 11, ticks
    assert ticks[0] >= low - 1e-12 and ticks[-1] <= high + 1e-12
    steps = np.diff(ticks)
    assert np.allclose(steps, steps[0])
    mantissa = steps[0] / 10 ** np.floor(np.log10(steps[0]))
    assert any(np.isclose(mantissa, m) for m in (1, 2, 2.5, 5)), steps[0]


def test_tick_texts_have_the_decimals_of_their_step():
    ticks = nice_ticks(0, 1)
    step = ticks[1] - ticks[0]
    assert [tick_text(v, step) for v in ticks] == ["0", "0.2", "0.4", "0.6", "0.8", "1.0"]
    assert [tick_text(v, 0.25) for v in (0, 0.25, 0.5)] == ["0", "0.25", "0.50"]
    assert tick_text(-0.0, 0.5) == "0" and tick_text(2000, 500) == "2000"


def test_log_ticks_are_decades_and_label_small_ones_in_e_notation():
    assert list(log_ticks(1e-6, 0.3)) == pytest.approx([1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1])
    assert [tick_text(v, log=True) for v in log_ticks(1e-6, 1e-4)] == ["1e-06", "1e-05", "1e-04"]
    assert [tick_text(v, log=True) for v in log_ticks(1, 1000)] == ["1", "10", "100", "1000"]
    assert list(log_ticks(108, 1080)) == pytest.approx([200, 500, 1000])  # within a decade: 1, 2, 5 times
    assert len(log_ticks(1e-30, 1e30)) <= 9


@pytest.mark.parametrize("values, log, expected", [
    ([], False, (0.0, 1.0)), ([np.nan, np.inf], False, (0.0, 1.0)), ([5.0], False, (4.5, 5.5)),
    ([5.0, 5.0, np.nan], False, (4.5, 5.5)), ([2.0, np.nan, 7.0], False, (2.0, 7.0)), ([], True, (1.0, 10.0)),
    ([0.0, -1.0, 100.0], True, (100 / np.sqrt(10), 100 * np.sqrt(10)))])
def test_a_range_ignores_what_cannot_be_drawn_and_widens_a_single_value(values, log, expected):
    assert span(np.array(values, dtype=float), log) == pytest.approx(expected)


def test_colour_maps_interpolate_and_clip():
    assert colour_at(BLUES, 0) == BLUES[0] and colour_at(BLUES, 1) == BLUES[-1] and colour_at(BLUES, 7) == BLUES[-1]
    assert colour_at(BLUES, np.nan) == BLUES[0]
    bar = ColourBar("x", 1, 100, log=True)
    assert bar.share(10) == pytest.approx(0.5) and bar.share(0) == 0.0 and ColourBar("x", 3, 3).share(3) == 0.5


#: names a figure must draw as they are: markup, mathtext, an entity, quotes, a right-to-left override
ODD = ["<b>bold</b>", "$5 to $10", "$x^$ a_b\\c", "a & b &amp; c", "say \"hi\" 'there'", "\u202egpj.exe"]


def test_every_text_is_escaped_and_shown_literally():
    panel = Panel(xlabel=ODD[0], ylabel=ODD[1], title=ODD[2])
    for name in ODD:
        panel.line([0, 1], [1, 0], name)
    svg = Figure([panel]).svg()
    texts = _texts(svg)  # parsing as XML fails on any unescaped markup or ampersand
    for name in ODD:
        assert visible(name) in texts, name
    assert "<U+202E>gpj.exe" in texts and "\u202e" not in svg  # the override is shown, never obeyed
    assert "<b>" not in svg and escape("<b>") == "&lt;b&gt;"


def test_a_long_name_is_cut_where_drawn_and_kept_whole_in_its_title():
    long = "L" * 300
    panel = Panel(xlabel="label given", ylabel="true class")
    panel.heatmap(np.eye(2), [long, "short"], [long, "short"], ColourBar("P"), limit=12)
    svg = Figure([panel]).svg()
    assert "L" * 11 + "\u2026" in _texts(svg) and long not in _texts(svg)
    assert _titles(svg).count(long) == 2  # the tooltip of each axis' tick
    assert "short" in _texts(svg)


def test_empty_missing_single_and_equal_data_still_draw_a_figure():
    cases = {
        "empty": figures.histogram(Histogram(np.array([0.0, 1.0]), np.array([0])), "x", "items"),
        "nan": figures.accuracy_changes(np.array([np.nan, 0.1, -0.2])),
        "single": figures.histogram(Histogram(np.array([4.5, 5.5]), np.array([7])), "labels", "items"),
        "equal": figures.series(_frame([0.5, 0.5, 0.5]), ["value"], "rate"),
        "all_nan": figures.series(_frame([np.nan, np.nan]), ["value"], "rate"),
    }
    for name, figure in cases.items():
        svg = figure.svg()
        root = _parse(svg)
        assert "nan" not in svg.lower().replace("nan</text>", ""), name  # no NaN coordinate
        assert not re.search(r'="[^"]*inf', svg), name
        assert float(root.get("width")) > 0 and list(root.iter("text")), name
    assert "5" in _texts(cases["single"].svg())  # the one integer bin is labelled with its value
    assert {"0", "0.50", "1.00"} <= set(_texts(cases["equal"].svg()))  # half a unit either side of 0.5


def _frame(values: list[float]):
    import pandas as pd

    return pd.DataFrame({"value": values}, index=[f"2026-11-0{k + 1}" for k in range(len(values))])


def test_missing_values_break_a_line_and_leave_out_points():
    panel = Panel(xlabel="x", ylabel="y")
    panel.line([0, 1, 2, 3], [1, np.nan, 2, 3], "line")
    panel.points([0, 1], [np.nan, 1], "points")
    paths = [p.get("d") for p in _parse(Figure([panel]).svg()).iter("path") if p.get("fill") == "none"]
    line = next(d for d in paths if d and d.count("M") == 2 and "L" in d)
    assert line.count("L") == 1  # the lone point before the gap starts a segment, the other two join
    assert "nan" not in Figure([panel]).svg()


def test_a_log_axis_leaves_out_what_it_cannot_place():
    panel = Panel(xlabel="labels", ylabel="workers", xlog=True)
    panel.points(np.array([0.0, 1.0, 10.0, 100.0]), np.array([1.0, 2.0, 3.0, 4.0]), "w")
    svg = Figure([panel]).svg()
    dots = next(p.get("d") for p in _parse(svg).iter("path") if p.get("stroke-linecap") == "round"
                and p.get("d").count("M") > 1)
    assert dots.count("M") == 3
    assert {"1", "10", "100"} <= set(_texts(svg))


def test_a_figure_has_no_reference_outside_itself():
    scale = ColourBar("labels on gold", 1, 1000, log=True)
    panel = Panel(xlabel="x", ylabel="y")
    panel.points(np.random.default_rng(0).random(50), np.random.default_rng(1).random(50), "w",
                 values=np.arange(1, 51), scale=scale)
    svg = Figure([panel], bar=scale).svg()
    assert not re.search(r"https?:|href|url\(|<image|<script|\bid=", svg)
    assert "labels on gold" in _texts(svg)
    colours = {p.get("stroke") for p in _parse(svg).iter("path") if p.get("stroke-linecap") == "round"}
    assert len(colours) > 5  # each point coloured by its value


def test_heatmaps_of_many_classes_turn_their_ticks_and_drop_cell_text():
    classes = [f"class {k} " + "x" * (3 * k) for k in range(20)]
    many = figures.crowd_confusion(np.full((20, 20), 0.05), classes)
    texts = _texts(many.svg())
    assert not [t for t in texts if t == "0.05"]  # over 12 classes, no values in the cells
    turned = [t for t in _parse(many.svg()).iter("text") if "rotate(-90" in (t.get("transform") or "")]
    assert len(turned) >= 20 + 2  # the column names, the y label and the colour bar's label
    assert "class 19 " + "x" * 30 + "\u2026" in texts and classes[19] in _titles(many.svg())  # cut to 40
    title = "L" * 100 + " (most labels)"
    few = figures.worker_confusions(np.full((1, 9, 9), np.nan), [title], classes[:9])
    assert "class 0 " not in _texts(few.svg())  # over 8 classes, the small heatmaps name none
    assert "L" * 27 + "\u2026" in _texts(few.svg()) and title in _titles(few.svg())  # the worker's title cut
    assert "P(label | true class)" in _texts(few.svg())


def test_points_coloured_by_value_are_grouped_by_colour_in_the_order_colours_first_appear():
    from crowdspark.report.svg import _by_colour

    colours = np.random.default_rng(0).choice(np.array(["#000001", "#0000ff", "#00ff00", "#ff0000"]), size=200)
    expected = [(c, np.flatnonzero(colours == c)) for c in dict.fromkeys(colours)]
    found = _by_colour(colours)
    assert [c for c, _ in found] == [c for c, _ in expected] and colours[0] == found[0][0]
    assert all(np.array_equal(rows, want) for (_, rows), (_, want) in zip(found, expected))
    assert _by_colour(np.array([], dtype=str)) == []
