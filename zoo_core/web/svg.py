"""Pictures for the gallery as SVG text: loss curves and heat maps (attention, logit lens, patching).

Hand-made SVG keeps the gallery free of a plotting dependency, small, sharp at
any zoom and readable from file:// (no fonts or scripts to fetch).
"""

from __future__ import annotations

import math
from html import escape
from typing import Sequence

PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"]


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round numbers spanning [low, high]."""
    if high <= low:
        return [low]
    raw = (high - low) / count
    step = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 2.5, 5, 10):
        if raw <= step * factor:
            step *= factor
            break
    first = math.ceil(low / step) * step
    return [first + i * step for i in range(int((high - first) / step + 1e-9) + 1)]


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:g}"


def line_chart(
    series: dict[str, Sequence[tuple[float, float]]],
    title: str,
    x_label: str,
    y_label: str,
    width: int = 560,
    height: int = 300,
) -> str:
    """Curves sharing axes, one colour each, with a legend (loss against step)."""
    points = [p for curve in series.values() for p in curve if math.isfinite(p[1])]
    if not points:
        return ""
    left, right, top, bottom = 58, 30, 28, 42
    x_low, x_high = min(p[0] for p in points), max(p[0] for p in points)
    y_low, y_high = min(p[1] for p in points), max(p[1] for p in points)
    if x_high == x_low:
        x_high = x_low + 1
    if y_high == y_low:
        y_high = y_low + 1
    pad = (y_high - y_low) * 0.05
    y_low, y_high = y_low - pad, y_high + pad

    def x(value):
        return left + (value - x_low) / (x_high - x_low) * (width - left - right)

    def y(value):
        return top + (y_high - value) / (y_high - y_low) * (height - top - bottom)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(title)}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="13">{escape(title)}</text>',
    ]
    for tick in _ticks(y_low, y_high):
        parts.append(f'<line x1="{left}" x2="{width - right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" stroke="#e6e6e6"/>')
        parts.append(f'<text x="{left - 5}" y="{y(tick) + 4:.1f}" text-anchor="end">{_number(round(tick, 6))}</text>')
    for tick in _ticks(x_low, x_high):
        parts.append(f'<text x="{x(tick):.1f}" y="{height - bottom + 15}" text-anchor="middle">{_number(tick)}</text>')
    parts.append(
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{height - top - bottom}" fill="none" stroke="#888"/>'
    )
    parts.append(
        f'<text x="{(left + width - right) / 2}" y="{height - 8}" text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append(
        f'<text transform="translate(14 {(top + height - bottom) / 2}) rotate(-90)" text-anchor="middle">{escape(y_label)}</text>'
    )
    for i, (name, curve) in enumerate(series.items()):
        colour = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in curve if math.isfinite(b))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.6" points="{path}"/>')
        legend_y = top + 14 + 15 * i
        parts.append(
            f'<line x1="{width - right - 120}" x2="{width - right - 100}" y1="{legend_y - 4}" y2="{legend_y - 4}" stroke="{colour}" stroke-width="2"/>'
        )
        parts.append(f'<text x="{width - right - 95}" y="{legend_y}">{escape(name)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _blue(value: float) -> str:
    """0 -> white, 1 -> dark blue (attention weights)."""
    value = min(max(value, 0.0), 1.0)
    r, g, b = (int(255 + (target - 255) * value) for target in (8, 48, 107))
    return f"#{r:02x}{g:02x}{b:02x}"


def heatmap(
    matrix: Sequence[Sequence[float]],
    row_labels: Sequence[str],
    column_labels: Sequence[str],
    title: str,
    cell: int = 16,
    annotate: bool | None = None,
    cell_text: Sequence[Sequence[str]] | None = None,
) -> str:
    """A (rows, columns) grid of weights in [0, 1]; rows attend to columns.

    ``cell_text`` writes a word in each cell instead of its value (the logit
    lens's predicted tokens); the value stays in the cell's tooltip."""
    rows, columns = len(row_labels), len(column_labels)
    annotate = rows <= 12 and columns <= 12 if annotate is None else annotate
    if cell_text is not None:
        annotate = True
        widest = max((len(text) for row in cell_text for text in row), default=1)
        cell = max(cell, 30, int(8 + 6 * widest))
    elif annotate:
        cell = max(cell, 30)
    label_width = 8 + 6.5 * max((len(label) for label in [*row_labels, *column_labels]), default=1)
    left, top = label_width, label_width + 20
    width, height = left + columns * cell + 6, top + rows * cell + 6
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{escape(title)}" font-family="monospace" font-size="10">',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
        f'<text x="4" y="13" font-family="sans-serif" font-size="12">{escape(title)}</text>',
    ]
    for i, label in enumerate(row_labels):
        parts.append(
            f'<text x="{left - 4:.1f}" y="{top + i * cell + cell * 0.7:.1f}" text-anchor="end">{escape(label)}</text>'
        )
    for j, label in enumerate(column_labels):
        cx = left + j * cell + cell * 0.65
        parts.append(f'<text transform="translate({cx:.1f} {top - 4:.1f}) rotate(-90)">{escape(label)}</text>')
    for i, row in enumerate(matrix):
        for j, value in enumerate(row):
            value = float(value)
            parts.append(
                f'<rect x="{left + j * cell:.1f}" y="{top + i * cell}" width="{cell}" height="{cell}" '
                f'fill="{_blue(value)}"><title>{escape(row_labels[i])} → {escape(column_labels[j])}: {value:.3f}</title></rect>'
            )
            if annotate:
                colour = "white" if value > 0.5 else "black"
                text = escape(cell_text[i][j]) if cell_text is not None else f"{value:.2f}"
                parts.append(
                    f'<text x="{left + j * cell + cell / 2:.1f}" y="{top + i * cell + cell * 0.62:.1f}" '
                    f'text-anchor="middle" font-size="9" fill="{colour}">{text}</text>'
                )
    parts.append("</svg>")
    return "\n".join(parts)


def _diverging(value: float, scale: float) -> str:
    """0 -> white, +scale -> dark red, -scale -> dark blue (a signed change)."""
    share = 0.0 if scale <= 0 else min(abs(value) / scale, 1.0)
    target = (165, 15, 21) if value > 0 else (8, 48, 107)
    r, g, b = (int(255 + (t - 255) * share) for t in target)
    return f"#{r:02x}{g:02x}{b:02x}"


def signed_heatmap(
    matrix: Sequence[Sequence[float | None]],
    row_labels: Sequence[str],
    column_labels: Sequence[str],
    title: str,
    cell: int = 46,
) -> str:
    """A grid of signed numbers (a loss change per layer and head), each cell written
    out, red above zero and blue below, scaled to the largest magnitude; None is blank."""
    values = [abs(float(v)) for row in matrix for v in row if v is not None]
    scale = max(values, default=0.0)
    label_width = 8 + 6.5 * max((len(label) for label in row_labels), default=1)
    left, top = label_width, 40
    width = max(left + len(column_labels) * cell + 6, 10 + 7 * len(title))  # the title fits
    height = top + len(row_labels) * 24 + 6
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="{escape(title)}" font-family="monospace" font-size="10">',
        f'<rect width="{width:.0f}" height="{height:.0f}" fill="white"/>',
        f'<text x="4" y="13" font-family="sans-serif" font-size="12">{escape(title)}</text>',
    ]
    for j, label in enumerate(column_labels):
        parts.append(
            f'<text x="{left + j * cell + cell / 2:.1f}" y="{top - 5}" text-anchor="middle">{escape(label)}</text>'
        )
    for i, (label, row) in enumerate(zip(row_labels, matrix)):
        y = top + i * 24
        parts.append(f'<text x="{left - 4:.1f}" y="{y + 16}" text-anchor="end">{escape(label)}</text>')
        for j, value in enumerate(row):
            if value is None:
                continue
            value = float(value)
            colour = "white" if scale and abs(value) / scale > 0.6 else "black"
            parts.append(
                f'<rect x="{left + j * cell:.1f}" y="{y}" width="{cell}" height="24" fill="{_diverging(value, scale)}">'
                f"<title>{escape(label)}, {escape(column_labels[j])}: {value:+.4f}</title></rect>"
            )
            parts.append(
                f'<text x="{left + j * cell + cell / 2:.1f}" y="{y + 16}" text-anchor="middle" fill="{colour}">{value:+.3f}</text>'
            )
    parts.append("</svg>")
    return "\n".join(parts)
