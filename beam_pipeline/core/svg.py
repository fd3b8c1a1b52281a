"""The report's plots as inline SVG strings: histograms, line charts, scatter plots, bar
charts and a confusion matrix.

Hand-written rather than a charting library because the report must open offline as one
file: inlining a JS charting library would add hundreds of KB of script to every run
directory, and matplotlib's SVG output is ~40 KB per small plot with embedded glyphs. Each
plot here is a few hundred bytes of plain SVG that any browser draws with no script.
Every element carries a ``class`` (``bp-hist``, ``bp-curve``, ``bp-scatter``, ``bp-bars``,
``bp-matrix``) so that the report's test can find the plots.

The axes leave room for their labels: tick labels sit beside the axis, the axis titles
outside them (the y title rotated at the left edge, the x title under the tick labels), so
that no text overlaps; a log axis (``xlog``) has its ticks at powers of ten.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from typing import Optional

__all__ = ["bars", "histogram", "lines", "matrix", "overlaid_histograms", "scatter"]

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2")
# Room for the tick labels and the axis titles (pixels): left, right, top, bottom.
_LEFT, _RIGHT, _TOP, _BOTTOM = 64, 12, 12, 42


def _fmt(x: float) -> str:
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.4g}"
    return f"{x:.2e}"


def _span(lo: float, hi: float) -> tuple[float, float]:
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return 0.0, 1.0
    if hi - lo < 1e-12:
        margin = abs(lo) * 0.1 or 0.5
        return lo - margin, hi + margin
    return lo, hi


def _ticks(lo: float, hi: float, count: int = 4, integer: bool = False) -> list[float]:
    """Round values between ``lo`` and ``hi`` (1, 2 or 5 times a power of ten apart;
    whole numbers only on an ``integer`` axis: epochs, steps)."""
    raw = (hi - lo) / max(count, 1)
    if raw <= 0 or not math.isfinite(raw):
        return [lo]
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    v = first
    while v <= hi + step * 1e-9:
        out.append(0.0 if abs(v) < step * 1e-9 else v)
        v += step
    return out or [lo]


def _log_ticks(lo: float, hi: float) -> list[float]:
    return [10.0**e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


class _Frame:
    """The plotting area of a chart and its data-to-pixel mapping."""

    def __init__(self, width, height, x0, x1, y0, y1, xlog=False, xint=False):
        self.width, self.height, self.xlog, self.xint = width, height, xlog, xint
        self.w, self.h = width - _LEFT - _RIGHT, height - _TOP - _BOTTOM
        self.x0, self.x1, self.y0, self.y1 = x0, x1, y0, y1

    def _xv(self, x: float) -> float:
        return math.log10(x) if self.xlog else x

    def px(self, x: float) -> float:
        lo, hi = self._xv(self.x0), self._xv(self.x1)
        return _LEFT + self.w * (self._xv(x) - lo) / ((hi - lo) or 1.0)

    def py(self, y: float) -> float:
        return _TOP + self.h - self.h * (y - self.y0) / ((self.y1 - self.y0) or 1.0)

    def axes(self, xlabel: str, ylabel: str, xnumbers: bool = True) -> str:
        bottom, parts = _TOP + self.h, []
        for t in _ticks(self.y0, self.y1):
            y = self.py(t)
            parts.append(
                f'<line x1="{_LEFT}" y1="{y:.1f}" x2="{_LEFT + self.w}" y2="{y:.1f}" '
                f'stroke="#eee"/><text x="{_LEFT - 5}" y="{y + 3.5:.1f}" font-size="10" '
                f'text-anchor="end">{escape(_fmt(t))}</text>'
            )
        if xnumbers:
            xt = (
                _log_ticks(self.x0, self.x1)
                if self.xlog
                else _ticks(self.x0, self.x1, 5, integer=self.xint)
            )
            for t in xt:
                if not (self.x0 - 1e-12 <= t <= self.x1 + 1e-12):
                    continue
                x = self.px(t)
                parts.append(
                    f'<line x1="{x:.1f}" y1="{bottom}" x2="{x:.1f}" y2="{bottom + 4}" '
                    f'stroke="#888"/><text x="{x:.1f}" y="{bottom + 15}" font-size="10" '
                    f'text-anchor="middle">{escape(_fmt(t))}</text>'
                )
        parts.append(
            f'<line x1="{_LEFT}" y1="{bottom}" x2="{_LEFT + self.w}" y2="{bottom}" stroke="#888"/>'
            f'<line x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{bottom}" stroke="#888"/>'
            f'<text class="bp-xtitle" x="{_LEFT + self.w / 2:.1f}" y="{self.height - 4}" '
            f'font-size="11" text-anchor="middle">{escape(xlabel)}'
            f"{' (log scale)' if self.xlog else ''}</text>"
            f'<text class="bp-ytitle" x="12" y="{_TOP + self.h / 2:.1f}" font-size="11" '
            f'text-anchor="middle" transform="rotate(-90 12 {_TOP + self.h / 2:.1f})">'
            f"{escape(_fit(ylabel, self.h))}</text>"
        )
        return "".join(parts)


def _fit(text: str, room: float) -> str:
    """``text`` cut to what ``room`` pixels hold at the titles' font size (~6.5 px a
    character), so that a long title is not clipped mid-glyph at the chart's edge."""
    most = max(4, int(room / 6.5))
    return text if len(text) <= most else text[: most - 1] + "…"


def _svg(cls: str, width: int, height: int, body: str, attributes: str = "") -> str:
    return (
        f'<svg class="{cls}"{attributes} width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" '
        f'font-family="sans-serif">{body}</svg>'
    )


def histogram(buckets: Sequence[tuple[float, float, float]], *, width=300, height=84) -> str:
    """Bars of (low, high, count) buckets on a value axis."""
    return overlaid_histograms({"": buckets}, width=width, height=height)


def _edge(x: float) -> str:
    """A bucket edge as the SVG's data attributes carry it (``repr``: exact, and ``inf``)."""
    return repr(float(x))


def overlaid_histograms(
    splits: Mapping[str, Sequence[tuple[float, float, float]]], *, width=300, height=96
) -> str:
    """Each split's (low, high, count) buckets drawn on ONE value axis, overlaid (TFDV's
    ``visualize_statistics(lhs, rhs)``): a bar spans its bucket's own low to high, its
    height the split's share of rows per unit of value, so splits bucketed differently
    (train 0 to 31.8, eval 0 to 8.06) are compared by value, not by bucket position. A
    zero-width bucket (one value) is a thin bar; an infinite edge reaches a stub past the
    axis labelled -inf/inf. Each bar carries ``data-low``/``data-high`` (the bucket's
    edges) and the chart ``data-x0``/``data-x1``/``data-px0``/``data-px1`` (the values at
    the plot's left and right pixels), so that a browser's layout can be checked against
    the statistics."""
    splits = {k: v for k, v in splits.items() if v}
    if not splits:
        return ""
    finite = [e for b in splits.values() for lo, hi, _ in b for e in (lo, hi) if math.isfinite(e)]
    x0, x1 = _span(min(finite, default=0.0), max(finite, default=1.0))
    neg = any(lo == -math.inf for b in splits.values() for lo, _, _ in b)
    pos = any(hi == math.inf for b in splits.values() for _, hi, _ in b)
    stub = 16
    px0, px1 = 4 + (stub if neg else 0), width - 4 - (stub if pos else 0)
    base = height - 26 - (12 if len(splits) > 1 else 0)

    def px(v: float) -> float:
        if v == -math.inf:
            return px0 - stub
        if v == math.inf:
            return px1 + stub
        return px0 + (px1 - px0) * (v - x0) / (x1 - x0)

    unit = (x1 - x0) / (px1 - px0)  # value units per pixel
    bars = []  # (split index, name, low, high, count, share, density)
    for k, (name, buckets) in enumerate(splits.items()):
        total = sum(c for _, _, c in buckets) or 1.0
        for low, high, count in buckets:
            share = count / total
            width_px = max(px(high) - px(low), 2.0)
            bars.append((k, name, low, high, count, share, share / (width_px * unit)))
    wide = [d for _, _, lo, hi, _, _, d in bars if lo != hi and math.isfinite(lo + hi)]
    top = max(wide, default=0.0) or max(d for *_, d in bars) or 1.0
    rects = []
    for k, name, low, high, count, share, density in bars:
        left, right = px(low), px(high)
        if right - left < 2.0:
            left, right = (left + right) / 2 - 1.0, (left + right) / 2 + 1.0
        h = (base - 2) * min(density / top, 1.0)
        label = f"{name}: " if name else ""
        rects.append(
            f'<rect class="bp-bucket" data-split="{escape(name)}" data-low="{_edge(low)}" '
            f'data-high="{_edge(high)}" x="{left:.2f}" y="{base - h:.2f}" '
            f'width="{right - left:.2f}" height="{h:.2f}" fill="{_COLORS[k % len(_COLORS)]}" '
            f'fill-opacity="0.5"><title>{escape(label)}{_fmt(low)} to {_fmt(high)}: '
            f"{count:.0f} ({100 * share:.1f}%)</title></rect>"
        )
    axis = (
        f'<line x1="{px(-math.inf) if neg else px0:.1f}" y1="{base}" '
        f'x2="{px(math.inf) if pos else px1:.1f}" y2="{base}" stroke="#888"/>'
        f'<text x="{px0:.1f}" y="{base + 11}" font-size="10">{escape(_fmt(x0))}</text>'
        f'<text x="{px1:.1f}" y="{base + 11}" font-size="10" text-anchor="end">'
        f"{escape(_fmt(x1))}</text>"
    )
    if neg:
        axis += f'<text x="2" y="{base + 22}" font-size="10">-inf</text>'
    if pos:
        axis += f'<text x="{width - 2}" y="{base + 22}" font-size="10" text-anchor="end">inf</text>'
    legend, x = "", 4.0
    if len(splits) > 1:
        for k, name in enumerate(splits):
            legend += (
                f'<text x="{x:.1f}" y="{height - 2}" font-size="10" '
                f'fill="{_COLORS[k % len(_COLORS)]}">{escape(name)}</text>'
            )
            x += 6.5 * len(name) + 10
    return _svg(
        "bp-hist",
        width,
        height,
        "".join(rects) + axis + legend,
        f' data-x0="{_edge(x0)}" data-x1="{_edge(x1)}" data-px0="{px0:.2f}" data-px1="{px1:.2f}"',
    )


def lines(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    xlabel: str = "step",
    ylabel: str = "",
    width: int = 380,
    height: int = 220,
    diagonal: bool = False,
    xlog: bool = False,
) -> str:
    """One polyline per named series of (x, y) points, with a legend.

    Each point is also drawn as a dot (with its value as a tooltip) when a series has few,
    so that a series of one point (a one-epoch fit) still shows, and is labelled with its
    value. ``diagonal`` draws y = x (a calibration plot's ideal).
    """
    points = [p for s in series.values() for p in s]
    if not points:
        return ""
    x0, x1 = _span(min(p[0] for p in points), max(p[0] for p in points))
    y0, y1 = _span(min(p[1] for p in points), max(p[1] for p in points))
    if diagonal:
        x0 = y0 = min(x0, y0)
        x1 = y1 = max(x1, y1)
    xint = all(float(p[0]).is_integer() for p in points)
    f = _Frame(width, height, x0, x1, y0, y1, xlog=xlog and x0 > 0, xint=xint)
    parts = [f.axes(xlabel, ylabel)]
    if diagonal:
        parts.append(
            f'<line x1="{f.px(x0):.1f}" y1="{f.py(y0):.1f}" x2="{f.px(x1):.1f}" '
            f'y2="{f.py(y1):.1f}" stroke="#bbb" stroke-dasharray="4 3"/>'
        )
    for i, (name, pts) in enumerate(series.items()):
        color = _COLORS[i % len(_COLORS)]
        xy = [(f.px(x), f.py(y), x, y) for x, y in pts]
        if len(xy) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y, _, _ in xy)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}"/>')
        if len(xy) <= 30:
            for x, y, vx, vy in xy:
                parts.append(
                    f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{4 if len(xy) == 1 else 2.5}" '
                    f'fill="{color}"><title>{escape(name)} at {xlabel} {_fmt(vx)}: '
                    f"{_fmt(vy)}</title></circle>"
                )
        if len(xy) == 1:  # a lone point's value beside it, inside the plotting area
            x, y, _, vy = xy[0]
            right = x > _LEFT + f.w / 2
            # Below a point high in the plot: the legend is in its top right corner.
            ty = y + 14 if y < _TOP + f.h / 3 else y - 6
            parts.append(
                f'<text x="{x - 6 if right else x + 6:.1f}" y="{ty:.1f}" '
                f'font-size="10" fill="{color}" text-anchor="{"end" if right else "start"}">'
                f"{escape(_fmt(vy))}</text>"
            )
        parts.append(
            f'<text x="{_LEFT + f.w - 4}" y="{_TOP + 12 + 13 * i}" font-size="11" '
            f'text-anchor="end" fill="{color}">{escape(name)}</text>'
        )
    return _svg("bp-curve", width, height, "".join(parts))


def scatter(
    points: Sequence[tuple[float, float, str]],
    *,
    xlabel: str,
    ylabel: str,
    categories: Sequence[str] = (),
    width: int = 300,
    height: int = 210,
    xlog: bool = False,
) -> str:
    """Points (x, y, tooltip); with ``categories``, x is an index into them (a choice);
    ``xlog``: x on a log scale (a hyperparameter sampled on one)."""
    if not points:
        return ""
    if categories:
        x0, x1 = -0.5, len(categories) - 0.5
    elif xlog and min(p[0] for p in points) > 0:
        lo, hi = min(p[0] for p in points), max(p[0] for p in points)
        x0, x1 = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
        if x0 == x1:
            x0, x1 = x0 / 10, x1 * 10
    else:
        xlog = False
        x0, x1 = _span(min(p[0] for p in points), max(p[0] for p in points))
    y0, y1 = _span(min(p[1] for p in points), max(p[1] for p in points))
    xint = all(float(p[0]).is_integer() for p in points)
    f = _Frame(width, height, x0, x1, y0, y1, xlog=xlog and not categories, xint=xint)
    parts = [f.axes(xlabel, ylabel, not categories)]
    bottom = _TOP + f.h
    for i, name in enumerate(categories):
        parts.append(
            f'<text x="{f.px(i):.1f}" y="{bottom + 15}" font-size="10" text-anchor="middle">'
            f"{escape(str(name))}</text>"
        )
    for x, y, tip in points:
        parts.append(
            f'<circle cx="{f.px(x):.1f}" cy="{f.py(y):.1f}" r="4" fill="{_COLORS[0]}" '
            f'fill-opacity="0.7"><title>{escape(tip)}</title></circle>'
        )
    return _svg("bp-scatter", width, height, "".join(parts))


def bars(
    groups: Mapping[str, Mapping[str, Optional[float]]],
    *,
    xlabel: str,
    bound: Optional[tuple[float, str]] = None,
    width: int = 420,
    row: int = 16,
) -> str:
    """Horizontal bars: per group (a slice), one bar per series (candidate, baseline), with
    a legend; ``bound`` (value, label) draws a threshold as a dashed line."""
    names = list(dict.fromkeys(s for g in groups.values() for s in g))
    values = [v for g in groups.values() for v in g.values() if v is not None]
    if not values:
        return ""
    label_w = min(170, 8 + 6 * max(len(g) for g in groups))
    lo, hi = min(0.0, *values), max(0.0, *values)
    if bound is not None:
        lo, hi = min(lo, bound[0]), max(hi, bound[0])
    lo, hi = _span(lo, hi)
    plot_w = width - label_w - 60
    top = _TOP + 6  # room for the threshold's value above its line
    height = top + len(groups) * (len(names) * row + 6) + 34

    def px(v: float) -> float:
        return label_w + plot_w * (v - lo) / (hi - lo)

    parts, y = [], top
    for group, series in groups.items():
        parts.append(
            f'<text x="{label_w - 6}" y="{y + len(names) * row / 2 + 4:.1f}" font-size="11" '
            f'text-anchor="end">{escape(group)}</text>'
        )
        for k, name in enumerate(names):
            v = series.get(name)
            if v is not None:
                a, b = sorted((px(0.0 if lo <= 0 <= hi else lo), px(v)))
                parts.append(
                    f'<rect x="{a:.1f}" y="{y + k * row + 1}" width="{max(b - a, 1):.1f}" '
                    f'height="{row - 3}" fill="{_COLORS[k % len(_COLORS)]}"><title>'
                    f"{escape(group)}, {escape(name)}: {_fmt(v)}</title></rect>"
                    f'<text x="{b + 3:.1f}" y="{y + k * row + row - 4}" font-size="10">'
                    f"{escape(_fmt(v))}</text>"
                )
        y += len(names) * row + 6
    axis = y + 2
    parts.append(
        f'<line x1="{label_w}" y1="{axis}" x2="{label_w + plot_w}" y2="{axis}" stroke="#888"/>'
    )
    for t in _ticks(lo, hi):
        parts.append(
            f'<text x="{px(t):.1f}" y="{axis + 12}" font-size="10" text-anchor="middle">'
            f"{escape(_fmt(t))}</text>"
        )
    if bound is not None:
        x = px(bound[0])
        parts.append(
            f'<line class="bp-bound" x1="{x:.1f}" y1="{top - 4}" x2="{x:.1f}" y2="{axis}" '
            f'stroke="#d62728" stroke-dasharray="4 3"><title>{escape(bound[1])}</title></line>'
            f'<text x="{x:.1f}" y="{top - 6}" font-size="10" text-anchor="middle" '
            f'fill="#d62728">{escape(_fmt(bound[0]))}</text>'
        )
    parts.append(
        "".join(
            f'<text x="{label_w + 80 * k}" y="{height - 4}" font-size="10" '
            f'fill="{_COLORS[k % len(_COLORS)]}">&#9632; {escape(n)}</text>'
            for k, n in enumerate(names)
        )
        + f'<text x="{width - 4}" y="{height - 4}" font-size="11" text-anchor="end">'
        f"{escape(xlabel)}</text>"
    )
    return _svg("bp-bars", width, height, "".join(parts))


def matrix(labels: Sequence[str], counts: Sequence[Sequence[float]], *, cell: int = 34) -> str:
    """A confusion matrix: rows the actual class, columns the predicted one, each cell
    shaded by its share of the row and labelled with its count."""
    if not labels:
        return ""
    n = len(labels)
    left = min(120, 10 + 7 * max(len(str(label)) for label in labels))
    top = 34
    width, height = left + n * cell + 10, top + n * cell + 24
    parts = [
        f'<text x="{left + n * cell / 2:.1f}" y="12" font-size="11" text-anchor="middle">'
        "predicted</text>",
        f'<text x="10" y="{top + n * cell + 18}" font-size="11">actual (rows)</text>',
    ]
    for j, label in enumerate(labels):
        parts.append(
            f'<text x="{left + j * cell + cell / 2:.1f}" y="{top - 6}" font-size="10" '
            f'text-anchor="middle">{escape(str(label))}</text>'
        )
    for i, label in enumerate(labels):
        total = sum(counts[i]) or 1.0
        parts.append(
            f'<text x="{left - 5}" y="{top + i * cell + cell / 2 + 4:.1f}" font-size="10" '
            f'text-anchor="end">{escape(str(label))}</text>'
        )
        for j in range(n):
            c = counts[i][j]
            share = c / total
            cx, cy = left + j * cell + cell / 2, top + i * cell + cell / 2 + 4
            ink = "#fff" if share > 0.5 else "#222"
            fill = f"rgba(31,119,180,{0.08 + 0.85 * share:.2f})"
            parts.append(
                f'<rect x="{left + j * cell}" y="{top + i * cell}" width="{cell - 1}" '
                f'height="{cell - 1}" fill="{fill}"><title>actual {escape(str(label))}, '
                f"predicted {escape(str(labels[j]))}: {_fmt(c)}</title></rect>"
                f'<text x="{cx:.1f}" y="{cy:.1f}" font-size="11" text-anchor="middle" '
                f'fill="{ink}">'
                f"{escape(_fmt(c))}</text>"
            )
    return _svg("bp-matrix", width, height, "".join(parts))
