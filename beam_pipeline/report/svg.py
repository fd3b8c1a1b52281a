"""The report's plots as inline SVG strings: a histogram, line charts, a scatter plot.

Hand-written rather than a charting library because the report must open offline as one
file: inlining a JS charting library would add hundreds of KB of script to every run
directory, and matplotlib's SVG output is ~40 KB per small plot with embedded glyphs. Each
plot here is a few hundred bytes of plain SVG that any browser draws with no script.
Every element carries a ``class`` (``bp-hist``, ``bp-curve``, ``bp-scatter``) so that the
report's test can find the plots.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

__all__ = ["histogram", "lines", "scatter"]

_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd")


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


def histogram(buckets: Sequence[tuple[float, float, float]], *, width=220, height=70) -> str:
    """Bars of (low, high, count) buckets, equal widths as Facets draws them."""
    if not buckets:
        return ""
    top = max(c for _, _, c in buckets) or 1.0
    bar = width / len(buckets)
    rects = []
    for i, (low, high, count) in enumerate(buckets):
        h = (height - 14) * count / top
        rects.append(
            f'<rect x="{i * bar:.1f}" y="{height - 14 - h:.1f}" width="{max(bar - 1, 1):.1f}" '
            f'height="{h:.1f}" fill="{_COLORS[0]}"><title>{_fmt(low)} to {_fmt(high)}: '
            f"{count:.0f}</title></rect>"
        )
    lo, hi = buckets[0][0], buckets[-1][1]
    return (
        f'<svg class="bp-hist" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(rects)
        + f'<text x="0" y="{height - 2}" font-size="10">{escape(_fmt(lo))}</text>'
        f'<text x="{width}" y="{height - 2}" font-size="10" text-anchor="end">'
        f"{escape(_fmt(hi))}</text></svg>"
    )


def _axes(x0, x1, y0, y1, width, height, pad, xlabel, ylabel, xnumbers=True) -> str:
    w, h = width - pad - 10, height - pad - 10
    xticks = (
        f'<text x="{pad}" y="{height - 22}" font-size="10">{escape(_fmt(x0))}</text>'
        f'<text x="{pad + w}" y="{height - 22}" font-size="10" text-anchor="end">'
        f"{escape(_fmt(x1))}</text>"
        if xnumbers
        else ""
    )
    return (
        f'<line x1="{pad}" y1="{10 + h}" x2="{pad + w}" y2="{10 + h}" stroke="#888"/>'
        f'<line x1="{pad}" y1="10" x2="{pad}" y2="{10 + h}" stroke="#888"/>'
        + xticks
        + f'<text x="{pad - 4}" y="{10 + h}" font-size="10" text-anchor="end">{escape(_fmt(y0))}'
        f'</text><text x="{pad - 4}" y="18" font-size="10" text-anchor="end">'
        f"{escape(_fmt(y1))}</text>"
        f'<text x="{pad + w / 2}" y="{height - 6}" font-size="11" text-anchor="middle">'
        f"{escape(xlabel)}</text>"
        f'<text x="12" y="{10 + h / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 12 {10 + h / 2})">{escape(ylabel)}</text>'
    )


def lines(
    series: dict[str, Sequence[tuple[float, float]]],
    *,
    xlabel: str = "step",
    ylabel: str = "",
    width: int = 360,
    height: int = 200,
) -> str:
    """One polyline per named series of (x, y) points, with a legend."""
    points = [p for s in series.values() for p in s]
    if not points:
        return ""
    x0, x1 = _span(min(p[0] for p in points), max(p[0] for p in points))
    y0, y1 = _span(min(p[1] for p in points), max(p[1] for p in points))
    pad = 50
    w, h = width - pad - 10, height - pad - 10
    parts = [_axes(x0, x1, y0, y1, width, height, pad, xlabel, ylabel)]
    for i, (name, pts) in enumerate(series.items()):
        color = _COLORS[i % len(_COLORS)]
        xy = [(pad + w * (x - x0) / (x1 - x0), 10 + h - h * (y - y0) / (y1 - y0)) for x, y in pts]
        if len(xy) == 1:
            parts.append(f'<circle cx="{xy[0][0]:.1f}" cy="{xy[0][1]:.1f}" r="3" fill="{color}"/>')
        else:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
            parts.append(f'<polyline points="{path}" fill="none" stroke="{color}"/>')
        parts.append(
            f'<text x="{pad + w - 4}" y="{22 + 13 * i}" font-size="11" text-anchor="end" '
            f'fill="{color}">{escape(name)}</text>'
        )
    return (
        f'<svg class="bp-curve" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(parts)
        + "</svg>"
    )


def scatter(
    points: Sequence[tuple[float, float, str]],
    *,
    xlabel: str,
    ylabel: str,
    categories: Sequence[str] = (),
    width: int = 300,
    height: int = 200,
) -> str:
    """Points (x, y, tooltip); with ``categories``, x is an index into them (a choice)."""
    if not points:
        return ""
    if categories:
        x0, x1 = -0.5, len(categories) - 0.5
    else:
        x0, x1 = _span(min(p[0] for p in points), max(p[0] for p in points))
    y0, y1 = _span(min(p[1] for p in points), max(p[1] for p in points))
    pad = 50
    w, h = width - pad - 10, height - pad - 10
    parts = [_axes(x0, x1, y0, y1, width, height, pad, xlabel, ylabel, not categories)]
    for i, name in enumerate(categories):
        cx = pad + w * (i - x0) / (x1 - x0)
        parts.append(
            f'<text x="{cx:.1f}" y="{height - 22}" font-size="10" text-anchor="middle">'
            f"{escape(str(name))}</text>"
        )
    for x, y, tip in points:
        cx = pad + w * (x - x0) / (x1 - x0)
        cy = 10 + h - h * (y - y0) / (y1 - y0)
        parts.append(
            f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="4" fill="{_COLORS[0]}" fill-opacity="0.7">'
            f"<title>{escape(tip)}</title></circle>"
        )
    return (
        f'<svg class="bp-scatter" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(parts)
        + "</svg>"
    )
