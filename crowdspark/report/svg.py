"""A small plotting layer that writes figures as inline SVG text: no matplotlib, no script, no reference outside
the ``<svg>`` element (no id, no font, no image).

A :class:`Figure` is a grid of :class:`Panel` s and at most one :class:`ColourBar`. A panel has two axes (linear
or logarithmic, or categories for a heatmap), marks (bars from precomputed counts and edges, lines, points, one
colour per point or a colour from a value, reference lines, a heatmap with cell text) and a legend, drawn in a
strip above the plot area so that it never covers the data.

Every text is drawn literally: bidirectional controls are shown as codes (``<U+202E>``), then the text is
escaped with :func:`html.escape`; nothing is parsed as math or markup. A text longer than its limit is cut to the
limit with an ellipsis and the whole text is kept in a ``<title>`` (the browser's tooltip). Non-finite values
are left out of every mark; an axis without data spans 0 to 1, and one whose values are all equal spans half a
unit (half a decade on a log axis) either side of them.
"""

from __future__ import annotations

import html
import math
from functools import lru_cache
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

__all__ = ["PALETTE", "RED", "GREY", "BLUES", "VIRIDIS", "visible", "escape", "span", "nice_ticks", "log_ticks",
           "tick_text", "colour_at", "Panel", "ColourBar", "Figure"]

#: colours of successive series (matplotlib's "tab10", so the figures keep their look)
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
RED, GREY = "#d62728", "#808080"
#: colour maps as evenly spaced anchors, interpolated linearly (ColorBrewer's Blues, matplotlib's viridis)
BLUES = ("#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b")
VIRIDIS = ("#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779", "#6ece58", "#b5de2b",
           "#fde725")
#: bidirectional controls: inside a name they would reorder what follows, so a name shows them as codes
BIDI_CONTROLS = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"

FONT = 'font-family="DejaVu Sans,Verdana,Arial,sans-serif"'
#: font sizes (px) of axis labels, ticks, legends and cell text
LABEL, TICK, LEGEND, CELL = 12, 10, 10, 9
#: characters of a legend entry drawn
LEGEND_TEXT = 90
#: the width of a character relative to the font size, to make room for text (an estimate: no font is measured)
CHAR = 0.6


def visible(name: object, limit: int | None = None) -> str:
    """``name`` as text to show: each bidirectional control as ``<U+202E>`` (:data:`BIDI_CONTROLS`), cut to
    ``limit`` characters with an ellipsis when given."""
    text = "".join(f"<U+{ord(ch):04X}>" if ch in BIDI_CONTROLS else ch for ch in str(name))
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "\u2026"


def escape(name: object, limit: int | None = None) -> str:
    """:func:`visible` text escaped for SVG or HTML."""
    return html.escape(visible(name, limit), quote=True)


def _n(value: float) -> str:
    """A coordinate in px with at most one decimal."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def span(values: np.ndarray, log: bool = False) -> tuple[float, float]:
    """The range of the finite (and, when ``log``, positive) ``values``: 0 to 1 (1 to 10 when ``log``) without any,
    half a unit (half a decade) either side of a single value."""
    values = np.asarray(values, dtype=float).ravel()
    values = values[np.isfinite(values) & ((values > 0) if log else True)]
    if not values.size:
        return (1.0, 10.0) if log else (0.0, 1.0)
    low, high = float(values.min()), float(values.max())
    if high > low:
        return low, high
    return (low / math.sqrt(10), high * math.sqrt(10)) if log else (low - 0.5, high + 0.5)


def _nice_step(raw: float) -> float:
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw * (1 - 1e-9))


def nice_ticks(low: float, high: float, count: int = 6) -> np.ndarray:
    """About ``count`` round values (steps of 1, 2, 2.5 or 5 times a power of ten) within [low, high]."""
    if not high > low:
        low, high = span(np.array([low, high]))
    step = _nice_step((high - low) / max(count - 1, 1))
    first, last = math.ceil(low / step - 1e-9), math.floor(high / step + 1e-9)
    return np.array([k * step for k in range(first, last + 1)]) + 0.0


def log_ticks(low: float, high: float) -> np.ndarray:
    """The powers of ten within [low, high] (at most about eight of them), or 1, 2 and 5 times them when fewer
    than two fall inside."""
    first, last = math.ceil(math.log10(low) - 1e-9), math.floor(math.log10(high) + 1e-9)
    every = max(1, math.ceil((last - first + 1) / 8))
    decades = [10.0 ** k for k in range(first, last + 1, every)]
    if len(decades) >= 2:
        return np.array(decades)
    multiples = [m * 10.0 ** k for k in range(first - 1, last + 1) for m in (1, 2, 5)]
    return np.array([v for v in multiples if low * (1 - 1e-9) <= v <= high * (1 + 1e-9)])


def tick_text(value: float, step: float | None = None, log: bool = False) -> str:
    """A tick's label: on a linear axis with the decimals ``step`` needs; on a log axis a power of ten below 1 as
    ``1e-05``, others as plain numbers."""
    if log:
        k = round(math.log10(value))
        if k < 0 and math.isclose(value, 10.0 ** k, rel_tol=1e-9):
            return f"1e-{-k:02d}"
        return f"{value:g}"
    decimals = 0
    if step:
        power = math.floor(math.log10(step) + 1e-9)
        decimals = max(0, -power + (1 if math.isclose(step / 10.0 ** power, 2.5) else 0))
    text = f"{value:.{decimals}f}"
    return "0" if float(text) == 0 else text


def colour_at(anchors: Sequence[str], share: float) -> str:
    """The colour of a map at ``share`` in [0, 1] (clipped), as ``#rrggbb``."""
    share = min(max(float(share), 0.0), 1.0) if np.isfinite(share) else 0.0
    position = share * (len(anchors) - 1)
    k = min(int(position), len(anchors) - 2)
    t = position - k
    a, b = _rgb(anchors[k]), _rgb(anchors[k + 1])
    return "#" + "".join(f"{round(x + (y - x) * t):02x}" for x, y in zip(a, b))


@lru_cache(maxsize=None)
def _rgb(colour: str) -> tuple[int, ...]:
    """The red, green and blue of ``#rrggbb``."""
    return tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5))


def _text(x: float, y: float, name: object, size: int = TICK, anchor: str = "middle", limit: int | None = None,
          rotate: float = 0, extra: str = "") -> str:
    """A ``<text>`` of ``name`` shown literally; when cut to ``limit``, wrapped with a ``<title>`` of the whole."""
    turn = f' transform="rotate({_n(rotate)} {_n(x)} {_n(y)})"' if rotate else ""
    element = (f'<text x="{_n(x)}" y="{_n(y)}" font-size="{size}" text-anchor="{anchor}"{turn}{extra}>'
               f"{escape(name, limit)}</text>")
    if limit is not None and len(visible(name)) > limit:
        return f"<g><title>{escape(name)}</title>{element}</g>"
    return element


@dataclass
class _Axis:
    """One axis of a panel: its range and how values map to px (``start`` px at ``low``, ``end`` at ``high``)."""

    low: float
    high: float
    log: bool
    start: float = 0.0
    end: float = 1.0

    def __call__(self, values: np.ndarray | float) -> np.ndarray:
        values = np.asarray(values, dtype=float)
        if self.log:
            with np.errstate(divide="ignore", invalid="ignore"):
                values, low, high = np.log10(values), math.log10(self.low), math.log10(self.high)
        else:
            low, high = self.low, self.high
        return self.start + (values - low) / (high - low) * (self.end - self.start)

    def ticks(self) -> list[tuple[float, str]]:
        if self.log:
            return [(v, tick_text(v, log=True)) for v in log_ticks(self.low, self.high)]
        values = nice_ticks(self.low, self.high)
        step = float(values[1] - values[0]) if len(values) > 1 else None
        return [(v, tick_text(v, step)) for v in values]


@dataclass
class _Entry:
    """A legend entry: its text and how its swatch is drawn at (x, y), the swatch's centre."""

    label: str
    swatch: Callable[[float, float], str]


#: a mark: what it draws given the two axes, and the values it spans on each (for the automatic ranges)
_Draw = Callable[[_Axis, _Axis], str]


@dataclass
class Panel:
    """One plot: axes, marks and a legend.

    Attributes
    ----------
    width, height : int
        Size in px, labels and legend included.
    xlabel, ylabel, title : str
    title_limit : int
        Characters of the title drawn (the whole title is kept in a ``<title>``).
    xlog, ylog : bool
        Logarithmic axes (values <= 0 are left out).
    xlim, ylim : tuple of float, optional
        Ranges; by default the data's, with 5% margins (none under bars).
    """

    width: int = 720
    height: int = 330
    xlabel: str = ""
    ylabel: str = ""
    title: str = ""
    title_limit: int = 60
    xlog: bool = False
    ylog: bool = False
    xlim: tuple[float, float] | None = None
    ylim: tuple[float, float] | None = None
    legend: list[_Entry] = field(default_factory=list)
    _marks: list[_Draw] = field(default_factory=list, init=False, repr=False)
    _xs: list[np.ndarray] = field(default_factory=list, init=False, repr=False)
    _ys: list[np.ndarray] = field(default_factory=list, init=False, repr=False)
    _tight_x: bool = field(default=False, init=False, repr=False)
    _zero_y: bool = field(default=False, init=False, repr=False)
    _xticks: tuple[np.ndarray, list[str], float, int] | None = field(default=None, init=False, repr=False)
    _categories: tuple[list[str], list[str], int] | None = field(default=None, init=False, repr=False)

    # -- marks -------------------------------------------------------------------------------------------------
    def bars(self, edges: np.ndarray, counts: np.ndarray, label: str | None = None, colour: str = PALETTE[0],
             opacity: float = 1.0) -> None:
        """Bars of a histogram: ``counts`` of shape (b,) between ``edges`` of shape (b + 1,)."""
        edges, counts = np.asarray(edges, dtype=float), np.asarray(counts, dtype=float)
        self._xs.append(edges)
        self._ys.append(counts)
        self._tight_x = self._zero_y = True

        def draw(x: _Axis, y: _Axis) -> str:
            left, right, top = x(edges[:-1]), x(edges[1:]), y(counts)
            base = y(max(y.low, 0.0) if not y.log else y.low)
            shown = np.isfinite(left) & np.isfinite(right) & np.isfinite(top) & (counts > 0)
            path = "".join(f"M{_n(a)} {_n(base)}V{_n(t)}H{_n(b)}V{_n(base)}Z"
                           for a, b, t in zip(left[shown], right[shown], top[shown]))
            return (f'<path d="{path}" fill="{colour}" fill-opacity="{opacity:g}" stroke="white" '
                    f'stroke-width="0.6"/>' if path else "")

        self._marks.append(draw)
        if label is not None:
            self.legend.append(_Entry(label, lambda cx, cy: f'<rect x="{_n(cx - 7)}" y="{_n(cy - 4)}" width="14" '
                                                            f'height="8" fill="{colour}" fill-opacity="{opacity:g}"/>'))

    def line(self, x: np.ndarray, y: np.ndarray, label: str | None = None, colour: str = PALETTE[0],
             dashed: bool = False, dots: bool = False) -> None:
        """A line through the points (x, y), broken where a value is missing; ``dots`` marks each point."""
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        self._xs.append(x)
        self._ys.append(y)
        dash = ' stroke-dasharray="5 3"' if dashed else ""

        def draw(xa: _Axis, ya: _Axis) -> str:
            px, py = xa(x), ya(y)
            ok = np.isfinite(px) & np.isfinite(py)
            path, pen = [], False
            for a, b, good in zip(px, py, ok):
                if good:
                    path.append(f"{'L' if pen else 'M'}{_n(a)} {_n(b)}")
                pen = bool(good)
            out = (f'<path d="{"".join(path)}" fill="none" stroke="{colour}" stroke-width="1.5"{dash}/>'
                   if path else "")
            return out + (_dots(px[ok], py[ok], colour, 5) if dots else "")

        self._marks.append(draw)
        if label is not None:
            self.legend.append(_Entry(label, lambda cx, cy: (
                f'<path d="M{_n(cx - 10)} {_n(cy)}h20" stroke="{colour}" stroke-width="1.5"{dash}/>'
                + (_dots(np.array([cx]), np.array([cy]), colour, 5) if dots else ""))))

    def points(self, x: np.ndarray, y: np.ndarray, label: str | None = None, colour: str = PALETTE[0],
               size: float = 4.0, marker: str = "dot", values: np.ndarray | None = None,
               scale: ColourBar | None = None, opacity: float = 0.7) -> None:
        """Points at (x, y): ``marker`` "dot", "cross" or "ring"; coloured by ``values`` on ``scale`` when given."""
        x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
        self._xs.append(x)
        self._ys.append(y)

        def draw(xa: _Axis, ya: _Axis) -> str:
            px, py = xa(x), ya(y)
            ok = np.isfinite(px) & np.isfinite(py)
            if values is None or scale is None:
                return _marker(marker, px[ok], py[ok], colour, size, opacity)
            colours = np.array([scale.colour(v) for v in np.asarray(values, dtype=float)[ok]])
            return "".join(_marker(marker, px[ok][rows], py[ok][rows], c, size, opacity)
                           for c, rows in _by_colour(colours))

        self._marks.append(draw)
        if label is not None:
            swatch = colour if values is None or scale is None else scale.colour(scale.mid())
            self.legend.append(_Entry(label, lambda cx, cy: _marker(marker, np.array([cx]), np.array([cy]), swatch,
                                                                    max(size, 5.0), 1.0)))

    def vline(self, at: float, label: str | None = None, colour: str = GREY, dashed: bool = True) -> None:
        """A vertical reference line across the panel (left out when ``at`` is not finite)."""
        self._reference(at, label, colour, dashed, vertical=True)

    def hline(self, at: float, label: str | None = None, colour: str = GREY, dashed: bool = True) -> None:
        """A horizontal reference line across the panel (left out when ``at`` is not finite)."""
        self._reference(at, label, colour, dashed, vertical=False)

    def _reference(self, at: float, label: str | None, colour: str, dashed: bool, vertical: bool) -> None:
        (self._xs if vertical else self._ys).append(np.array([at], dtype=float))
        dash = ' stroke-dasharray="5 3"' if dashed else ""

        def draw(x: _Axis, y: _Axis) -> str:
            p = float((x if vertical else y)(at))
            if not np.isfinite(p):
                return ""
            d = f"M{_n(p)} {_n(y.start)}V{_n(y.end)}" if vertical else f"M{_n(x.start)} {_n(p)}H{_n(x.end)}"
            return f'<path d="{d}" stroke="{colour}" stroke-width="1.2"{dash}/>'

        self._marks.append(draw)
        if label is not None:
            self.legend.append(_Entry(label, lambda cx, cy: f'<path d="M{_n(cx - 10)} {_n(cy)}h20" stroke="{colour}" '
                                                            f'stroke-width="1.2"{dash}/>'))

    def heatmap(self, matrix: np.ndarray, columns: list[str], rows: list[str], scale: ColourBar,
                cell_text: bool = True, limit: int = 40) -> None:
        """Cells of ``matrix`` (shape (R, C)), row 0 at the top, coloured on ``scale``, each with its value to two
        decimals when ``cell_text``; ``columns`` and ``rows`` name the ticks (cut to ``limit`` characters, an
        empty list draws none)."""
        matrix = np.asarray(matrix, dtype=float)
        n_rows, n_columns = matrix.shape
        self.xlim, self.ylim = (-0.5, n_columns - 0.5), (n_rows - 0.5, -0.5)
        self._categories = (list(columns), list(rows), limit)

        def draw(x: _Axis, y: _Axis) -> str:
            out = []
            for (r, c), value in np.ndenumerate(matrix):
                left, right, top, bottom = x(c - 0.5), x(c + 0.5), y(r - 0.5), y(r + 0.5)
                fill = scale.colour(value) if np.isfinite(value) else "#ffffff"
                out.append(f'<rect x="{_n(left)}" y="{_n(top)}" width="{_n(right - left)}" '
                           f'height="{_n(bottom - top)}" fill="{fill}"/>')
                if cell_text and np.isfinite(value):
                    ink = "white" if scale.share(value) > 0.6 else "black"
                    out.append(_text((left + right) / 2, (top + bottom) / 2 + CELL * 0.35, f"{value:.2f}", CELL,
                                     extra=f' fill="{ink}"'))
            return "".join(out)

        self._marks.append(draw)

    def xticks(self, positions: np.ndarray, texts: list[str] | None = None, rotate: float = 0,
               limit: int = 40) -> None:
        """Ticks of the x axis at ``positions``, labelled ``texts`` (by default the numbers), turned by ``rotate``
        degrees (clockwise from the end of the text: the labels hang below the axis)."""
        positions = np.asarray(positions, dtype=float)
        names = [tick_text(v, 1.0) for v in positions] if texts is None else [str(t) for t in texts]
        self._xticks = (positions, names, rotate, limit)

    # -- layout ------------------------------------------------------------------------------------------------
    def _axes(self) -> tuple[_Axis, _Axis]:
        x = _Axis(*(self.xlim or self._range(self._xs, self.xlog, self._tight_x, False)), self.xlog)
        y = _Axis(*(self.ylim or self._range(self._ys, self.ylog, False, self._zero_y)), self.ylog)
        return x, y

    @staticmethod
    def _range(values: list[np.ndarray], log: bool, tight: bool, zero: bool) -> tuple[float, float]:
        low, high = span(np.concatenate(values) if values else np.array([]), log)
        if zero and not log:
            low = min(low, 0.0)
            return low, high + 0.05 * (high - low)
        if tight:
            return low, high
        if log:
            pad = (high / low) ** 0.05
            return low / pad, high * pad
        pad = 0.05 * (high - low)
        return low - pad, high + pad

    def _tick_labels(self, x: _Axis, y: _Axis) -> tuple[list[_Tick], list[_Tick], float]:
        """The ticks of both axes as (value, text, limit) and the turn of the x ticks' labels."""
        if self._categories is not None:
            columns, rows, limit = self._categories
            return ([(k, c, limit) for k, c in enumerate(columns)], [(k, r, limit) for k, r in enumerate(rows)],
                    90 if len(columns) > 6 else 0)
        if self._xticks is not None:
            positions, texts, rotate, limit = self._xticks
            return [(v, t, limit) for v, t in zip(positions, texts)], _plain(y.ticks()), rotate
        return _plain(x.ticks()), _plain(y.ticks()), 0

    def svg(self) -> str:
        """The panel as SVG elements from (0, 0) to (width, height)."""
        x, y = self._axes()
        xticks, yticks, rotate = self._tick_labels(x, y)
        widest_x = max((len(visible(t, limit)) for _, t, limit in xticks), default=1)
        widest_y = max((len(visible(t, limit)) for _, t, limit in yticks), default=1)
        left = 8 + LABEL * 1.4 + CHAR * TICK * widest_y + 8
        drop = (CHAR * TICK * widest_x * math.sin(math.radians(rotate)) + TICK) if rotate else TICK * 1.2
        bottom = 8 + LABEL * 1.4 + drop + 6
        legend_top = 6 + (LABEL * 1.5 if self.title else 0)
        legend, legend_height = self._legend_svg(left, self.width - 8, legend_top)
        top = legend_top + legend_height + 4
        x.start, x.end = left, self.width - 10
        y.start, y.end = self.height - bottom, top
        frame = f'x="{_n(left)}" y="{_n(top)}" width="{_n(x.end - left)}" height="{_n(y.start - top)}"'
        out = [f'<rect {frame} fill="white"/>', *(mark(x, y) for mark in self._marks),
               f'<rect {frame} fill="none" stroke="#333" stroke-width="0.8"/>', self._ticks_svg(x, y, xticks, yticks,
                                                                                                rotate), legend]
        if self.title:
            out.append(_text((x.start + x.end) / 2, 6 + LABEL, self.title, LABEL, limit=self.title_limit))
        out.append(_text((x.start + x.end) / 2, self.height - 8, self.xlabel, LABEL, limit=110))
        out.append(_text(8 + LABEL, (y.start + y.end) / 2, self.ylabel, LABEL, limit=60, rotate=-90))
        return "".join(out)

    @staticmethod
    def _ticks_svg(x: _Axis, y: _Axis, xticks: list[_Tick], yticks: list[_Tick], rotate: float) -> str:
        out, marks = [], []
        for value, text, limit in xticks:
            p = float(x(value))
            if np.isfinite(p) and x.start - 0.5 <= p <= x.end + 0.5:
                marks.append(f"M{_n(p)} {_n(y.start)}v4")
                out.append(_text(p + TICK * 0.35, y.start + 8, text, TICK, "end", limit, -rotate) if rotate
                           else _text(p, y.start + 6 + TICK, text, TICK, "middle", limit))
        for value, text, limit in yticks:
            p = float(y(value))
            if np.isfinite(p) and y.end - 0.5 <= p <= y.start + 0.5:
                marks.append(f"M{_n(x.start)} {_n(p)}h-4")
                out.append(_text(x.start - 6, p + TICK * 0.35, text, TICK, "end", limit))
        path = f'<path d="{"".join(marks)}" stroke="#333" stroke-width="0.8"/>' if marks else ""
        return path + "".join(out)

    def _legend_svg(self, left: float, right: float, top: float) -> tuple[str, float]:
        """The legend's entries in rows from ``left`` to ``right`` below ``top``, and its height."""
        if not self.legend:
            return "", 0.0
        out, cursor, row = [], left, 0
        for entry in self.legend:
            width = 26 + CHAR * LEGEND * len(visible(entry.label, LEGEND_TEXT)) + 14
            if cursor > left and cursor + width > right:
                row, cursor = row + 1, left
            cy = top + (row + 0.5) * LEGEND * 1.5
            out.append(entry.swatch(cursor + 10, cy)
                       + _text(cursor + 24, cy + LEGEND * 0.35, entry.label, LEGEND, "start", LEGEND_TEXT))
            cursor += width
        return "".join(out), (row + 1) * LEGEND * 1.5


#: a tick: its value, its text and the characters of it drawn (None: all)
_Tick = tuple[float, str, "int | None"]


def _plain(ticks: list[tuple[float, str]]) -> list[_Tick]:
    return [(v, t, None) for v, t in ticks]


def _by_colour(colours: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Each distinct colour of ``colours`` (n,), in the order it first appears, with the positions that have it
    (in order)."""
    if not colours.size:
        return []
    distinct, first, which = np.unique(colours, return_index=True, return_inverse=True)
    rows = np.argsort(which, kind="stable")
    bounds = np.searchsorted(which[rows], np.arange(len(distinct) + 1))
    return [(str(distinct[g]), rows[bounds[g]:bounds[g + 1]]) for g in np.argsort(first)]


def _dots(px: np.ndarray, py: np.ndarray, colour: str, size: float, opacity: float = 1.0) -> str:
    """Round dots of diameter ``size`` px at (px, py), as one path of zero-length round-capped strokes."""
    if not px.size:
        return ""
    d = "".join(f"M{_n(a)} {_n(b)}h0" for a, b in zip(px, py))
    return (f'<path d="{d}" stroke="{colour}" stroke-width="{_n(size)}" stroke-linecap="round" '
            f'stroke-opacity="{opacity:g}"/>')


def _marker(kind: str, px: np.ndarray, py: np.ndarray, colour: str, size: float, opacity: float) -> str:
    if kind == "dot":
        return _dots(px, py, colour, size, opacity)
    if not px.size:
        return ""
    h = size / 2
    if kind == "cross":
        d = "".join(f"M{_n(a - h)} {_n(b - h)}l{_n(size)} {_n(size)}m0 {_n(-size)}l{_n(-size)} {_n(size)}"
                    for a, b in zip(px, py))
        return f'<path d="{d}" stroke="{colour}" stroke-width="1.3" stroke-opacity="{opacity:g}" fill="none"/>'
    if kind == "ring":
        return "".join(f'<circle cx="{_n(a)}" cy="{_n(b)}" r="{_n(h)}" fill="none" stroke="{colour}" '
                       f'stroke-width="1.5"/>' for a, b in zip(px, py))
    raise ValueError(f"marker must be 'dot', 'cross' or 'ring', but got {kind!r}")


@dataclass
class ColourBar:
    """A colour map over [low, high] (log: over their logarithms), drawn at a figure's right with ``label``."""

    label: str
    low: float = 0.0
    high: float = 1.0
    anchors: Sequence[str] = BLUES
    log: bool = False

    def share(self, value: float) -> float:
        """Where ``value`` lies between low (0) and high (1), clipped."""
        if not np.isfinite(value) or (self.log and value <= 0):
            return 0.0
        a, b, v = ((math.log10(self.low), math.log10(self.high), math.log10(value)) if self.log
                   else (self.low, self.high, float(value)))
        return min(max((v - a) / (b - a), 0.0), 1.0) if b > a else 0.5

    def colour(self, value: float) -> str:
        return colour_at(self.anchors, self.share(value))

    def mid(self) -> float:
        return math.sqrt(self.low * self.high) if self.log else (self.low + self.high) / 2

    def svg(self, left: float, top: float, height: float) -> str:
        """The bar, 14 px wide, from (left, top), ``height`` px high, with ticks and its label on its right."""
        steps = 48
        out = [f'<rect x="{_n(left)}" y="{_n(top + height * (1 - (k + 1) / steps))}" width="14" '
               f'height="{_n(height / steps + 0.5)}" fill="{colour_at(self.anchors, (k + 0.5) / steps)}"/>'
               for k in range(steps)]
        out.append(f'<rect x="{_n(left)}" y="{_n(top)}" width="14" height="{_n(height)}" fill="none" stroke="#333" '
                   'stroke-width="0.8"/>')
        axis = _Axis(self.low, self.high, self.log, top + height, top)
        widest = 1
        for value, text in axis.ticks():
            p = float(axis(value))
            out.append(f'<path d="M{_n(left + 14)} {_n(p)}h4" stroke="#333" stroke-width="0.8"/>')
            out.append(_text(left + 21, p + TICK * 0.35, text, TICK, "start"))
            widest = max(widest, len(text))
        x = left + 26 + CHAR * TICK * widest + LABEL
        out.append(_text(x, top + height / 2, self.label, LABEL, limit=50, rotate=-90))
        return "".join(out)

    @property
    def width(self) -> float:
        return 26 + CHAR * TICK * 6 + LABEL * 1.6


@dataclass
class Figure:
    """Panels in a grid of ``columns`` columns, filled row by row, and an optional colour bar at the right."""

    panels: list[Panel] = field(default_factory=list)
    columns: int = 1
    bar: ColourBar | None = None

    def add(self, panel: Panel) -> Panel:
        self.panels.append(panel)
        return panel

    def svg(self) -> str:
        """The figure as an ``<svg>`` element to inline in HTML (its size in px, scalable by CSS)."""
        cell_w = max((p.width for p in self.panels), default=0)
        cell_h = max((p.height for p in self.panels), default=0)
        rows = -(-len(self.panels) // self.columns) if self.panels else 0
        grid_w, grid_h = cell_w * min(self.columns, max(len(self.panels), 1)), cell_h * rows
        width = grid_w + (self.bar.width if self.bar else 0)
        height = max(grid_h, 120 if self.bar else 0)
        out = [f'<g transform="translate({k % self.columns * cell_w} {k // self.columns * cell_h})">{p.svg()}</g>'
               for k, p in enumerate(self.panels)]
        if self.bar:
            out.append(self.bar.svg(grid_w + 4, 30, max(height - 80, 60)))
        return (f'<svg width="{_n(width)}" height="{_n(height)}" viewBox="0 0 {_n(width)} {_n(height)}" '
                f'role="img" {FONT} fill="#222">{"".join(out)}</svg>')
