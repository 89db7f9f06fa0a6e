"""Pictures a person would rather look at than numbers: attention maps, loss curves, inspection grids.

matplotlib is an optional extra (`pip install 'zoo-lm[plots]'`); only the commands
that draw need it. No pyplot: no GUI backend and no global state.
"""

from __future__ import annotations

import io
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import ZooError
from ..storage.files import atomic_write_bytes

if TYPE_CHECKING:
    from numpy.typing import NDArray


def _figure_class():
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ZooError("drawing needs matplotlib: pip install 'zoo-lm[plots]'") from None
    return Figure


def _save(figure, path: Path) -> None:
    """Rendered in memory, then written atomically: a full disk leaves no half PNG."""
    buffer = io.BytesIO()
    figure.savefig(buffer, dpi=120, format=Path(path).suffix.lstrip(".").lower() or "png")
    atomic_write_bytes(Path(path), buffer.getvalue())


def attention_grid_png(
    panels: Sequence[Sequence[tuple[str, NDArray[Any]]]],
    labels: Sequence[str],
    title: str,
    path: Path,
    annotate: bool | None = None,
) -> None:
    """Write rows of attention maps (each a titled (T, T) array), tokens on both axes.

    Cells show their weight as text when the maps are small enough to read.
    """
    Figure = _figure_class()
    rows, columns = len(panels), max(len(row) for row in panels)
    size = max(3.2, 0.32 * len(labels) + 1.6)
    figure = Figure(figsize=(size * columns, size * rows + 0.6), layout="constrained")
    figure.suptitle(title)
    annotate = len(labels) <= 12 if annotate is None else annotate
    grid = figure.subplots(rows, columns, squeeze=False)
    for row_axes, row in zip(grid, panels):
        for axes in row_axes[len(row) :]:
            axes.set_visible(False)
        for axes, (panel_title, matrix) in zip(row_axes, row):
            axes.imshow(matrix, vmin=0.0, vmax=1.0, cmap="Blues")
            axes.set_title(panel_title, fontsize=10)
            axes.set_xticks(range(len(labels)), labels, rotation=60, ha="right", fontsize=8)
            axes.set_yticks(range(len(labels)), labels, fontsize=8)
            axes.set_xlabel("attended token (key)", fontsize=8)
            axes.set_ylabel("attending token (query)", fontsize=8)
            if annotate:
                for i in range(len(labels)):
                    for j in range(len(labels)):
                        value = float(matrix[i][j])
                        axes.text(
                            j,
                            i,
                            f"{value:.2f}",
                            ha="center",
                            va="center",
                            fontsize=7,
                            color="white" if value > 0.5 else "black",
                        )
    _save(figure, path)


def text_panels_png(panels: Sequence[tuple[str, str]], title: str, path: Path, width: int = 60) -> None:
    """Write texts side by side, one titled panel each (samples from several models)."""
    Figure = _figure_class()
    # Undertrained models emit control bytes; a font has no glyph for them.
    printable = ["".join(c if c == "\n" or c.isprintable() else "·" for c in text) for _, text in panels]
    wrapped = ["\n".join(textwrap.fill(line, width) or " " for line in text.splitlines()) for text in printable]
    lines = max(text.count("\n") + 1 for text in wrapped)
    figure = Figure(figsize=(4.6 * len(panels), 0.8 + 0.17 * lines), layout="constrained")
    figure.suptitle(title, fontsize=10)
    for axes, (panel_title, _), text in zip(figure.subplots(1, len(panels), squeeze=False)[0], panels, wrapped):
        axes.set_axis_off()
        axes.set_title(panel_title, fontsize=9)
        axes.text(0.0, 1.0, text, family="monospace", fontsize=7, va="top", ha="left", transform=axes.transAxes)
    _save(figure, path)


def grid_png(
    matrix: Sequence[Sequence[float]],
    row_labels: Sequence[str],
    column_labels: Sequence[str],
    title: str,
    path: Path,
    cell_text: Sequence[Sequence[str]] | None = None,
    value_label: str = "",
) -> None:
    """Write one (rows, columns) grid of values in [0, 1] (logit lens, patching), each
    cell showing its value or its ``cell_text``, with a colour bar."""
    Figure = _figure_class()
    figure = Figure(figsize=(1.6 + 0.9 * len(column_labels), 1.2 + 0.5 * len(row_labels)), layout="constrained")
    axes = figure.subplots()
    image = axes.imshow(matrix, vmin=0.0, vmax=1.0, cmap="Blues", aspect="auto")
    axes.set_title(title, fontsize=10)
    axes.set_xticks(range(len(column_labels)), column_labels, rotation=60, ha="right", fontsize=8)
    axes.set_yticks(range(len(row_labels)), row_labels, fontsize=8)
    for i, row in enumerate(matrix):
        for j, value in enumerate(row):
            text = cell_text[i][j] if cell_text is not None else f"{value:.2f}"
            colour = "white" if value > 0.5 else "black"
            axes.text(j, i, text, ha="center", va="center", fontsize=7, color=colour)
    figure.colorbar(image, ax=axes, label=value_label)
    _save(figure, path)
