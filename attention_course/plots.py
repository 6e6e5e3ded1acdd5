"""Figures that several chapters draw."""
from __future__ import annotations

import matplotlib
import matplotlib.pyplot as plt
from matplotlib.colors import ListedColormap
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

# The two colours of a boolean map: pale grey for False, dark blue for True. Two flat colours and a legend,
# never a colour bar, because a bar promises values between 0 and 1 that a mask does not have.
BOOLEAN_COLOURS = ("#e8e8e8", "#1f4e9c")


def plot_attention_grid(maps, *, titles=None, key_axis="keys", query_axis="queries", colour_map="Purples",
                        panel_inches=2.8, shared_scale=True, scale_top=None, heading=None, boolean=False,
                        legend=("False", "True")):
    """Draw attention maps as a grid of heatmaps whose colours tell the truth, at most three to a row (more side
    by side would be shrunk to the book's column width until their labels cannot be read).

    Args:
        maps: a tensor or array of shape (n, queries, keys), one panel each (on any device).
        titles: optional list of n panel titles.
        key_axis, query_axis: the words under the columns and beside the rows.
        colour_map: the matplotlib colour map of weight panels.
        panel_inches: the side of one panel, in inches.
        shared_scale: True (default) puts every panel on one colour scale, 0 .. ``scale_top``, with one
            colour bar, so equal colours mean equal weights across panels. False gives each panel its
            own scale *and its own colour bar* (for panels whose ranges differ by orders of magnitude).
        scale_top: the top of the shared scale; default the largest entry over all panels.
        heading: an optional title over the whole grid.
        boolean: True draws yes/no data (masks, "can depend on") in two flat colours with a legend naming
            them (``legend``: the words for False and True) and no colour bar. Refuses maps with any
            value other than 0 and 1, so a weight map is never shown as if it were a mask.
    """
    import numpy as np
    import torch

    if torch.is_tensor(maps):
        maps = maps.detach().float().cpu().numpy()
    maps = np.asarray(maps, dtype=float)
    if boolean and not np.isin(maps, (0.0, 1.0)).all():
        raise ValueError("boolean=True draws 0/1 (False/True) data only; these maps hold other values")
    top = float(scale_top) if scale_top is not None else max(float(maps.max()), 1e-12)
    # The book shows a three-panel row at its column width, about 0.7 of the figure's own size, so the text
    # is drawn larger than matplotlib's 10 pt default to stay readable there (issue 28).
    with plt.rc_context({"font.size": 12, "axes.titlesize": 13, "axes.labelsize": 12, "legend.fontsize": 12}):
        fig = _draw(maps, titles, key_axis, query_axis, colour_map, panel_inches, shared_scale, top, heading,
                    boolean, legend)
    _show(fig, {"mode": "boolean" if boolean else "weights",
                "colour_bars": sum(ax.get_label() == "<colorbar>" for ax in fig.axes),
                "yes_no_data": bool(np.isin(maps, (0.0, 1.0)).all())})


# The key under which a notebook output records how plot_attention_grid drew it.
RECORD_KEY = "attention_course/heatmaps"


def _show(fig, record):
    """Show ``fig``. In a notebook (the inline backend) the figure's output carries ``record`` in its metadata,
    so that a test of the built book can read from the stored notebooks which mode drew each heatmap and
    whether yes/no data ended up on a colour bar (tests/test_book_walk.py); elsewhere plain ``plt.show()``."""
    if "inline" in matplotlib.get_backend().lower():
        from IPython.display import display

        display(fig, metadata={RECORD_KEY: record})
        plt.close(fig)
    else:
        plt.show()


def _draw(maps, titles, key_axis, query_axis, colour_map, panel_inches, shared_scale, top, heading, boolean, legend):
    n = len(maps)
    ncols = min(n, 3)
    nrows = -(-n // ncols)
    fig, grid = plt.subplots(nrows, ncols, figsize=(panel_inches * ncols + 0.8, panel_inches * nrows), squeeze=False,
                             constrained_layout=True)
    axes = grid.ravel()
    for ax in axes[n:]:  # the empty places of the last row
        ax.set_visible(False)
    for i, ax in enumerate(axes[:n]):
        panel_top = top if shared_scale else max(float(maps[i].max()), 1e-12)
        if boolean:
            image = ax.imshow(maps[i], cmap=ListedColormap(BOOLEAN_COLOURS), vmin=0.0, vmax=1.0,
                              interpolation="nearest")
        else:
            image = ax.imshow(maps[i], cmap=colour_map, vmin=0.0, vmax=panel_top)
        # Rows and columns are positions: integer ticks, at most about five, so that two-digit labels at the
        # larger font do not run into each other.
        ax.xaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(nbins=5, integer=True))
        ax.set_xlabel(key_axis)
        if i % ncols == 0:
            ax.set_ylabel(query_axis)
        if titles:
            ax.set_title(titles[i])
        if not shared_scale and not boolean:
            fig.colorbar(image, ax=ax, shrink=0.8)
    if boolean:
        patches = [Patch(facecolor=colour, edgecolor="black", linewidth=0.5, label=word)
                   for colour, word in zip(BOOLEAN_COLOURS, legend)]
        fig.legend(handles=patches, loc="outside lower center", ncols=2, frameon=False)
    elif shared_scale:
        # One scale for every panel, so one bar describes them all.
        fig.colorbar(image, ax=axes[:n].tolist(), shrink=0.8)
    if heading:
        fig.suptitle(heading)
    return fig


# The key under which a notebook's figure outputs record their smallest text, in points and in pixels of the PNG
# as stored (tests/test_book_walk.py scales it by how much the book shrinks the figure: the 10 px floor).
TEXT_KEY = "attention_course/figure-text"


def smallest_text(fig) -> dict | None:
    """The smallest visible text of ``fig``: its size in points, in pixels of the PNG that the inline backend
    stores (points x dpi / 72; ``bbox_inches='tight'`` crops the image but never rescales it) and the text itself;
    None for a figure without text."""
    from matplotlib.text import Text

    fig.draw_without_rendering()  # tick labels exist only once the figure has been laid out
    sizes = [(t.get_fontsize(), t.get_text()) for t in fig.findobj(Text)
             if t.get_visible() and t.get_text().strip() and t.figure is fig]
    if not sizes:
        return None
    points, text = min(sizes, key=lambda s: s[0])
    dpi = matplotlib.rcParams["savefig.dpi"]
    dpi = fig.dpi if dpi == "figure" else float(dpi)
    return {"points": round(float(points), 2), "pixels": round(float(points) * dpi / 72.0, 2), "text": text[:40]}


def record_figure_text(shell=None) -> bool:
    """Have every figure this IPython kernel shows carry :func:`smallest_text` in its output's metadata, under
    ``TEXT_KEY`` (a formatter of its own, beside the inline backend's PNG one, which the backend re-registers
    whenever its settings change, so this one survives). Called by ``runtime.start_chapter``; does nothing
    outside IPython. Returns whether it is in place."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return False
    from IPython.core.formatters import BaseFormatter
    from matplotlib.figure import Figure
    from traitlets import Unicode

    class FigureText(BaseFormatter):
        """Formats nothing (no data, so the book renders nothing for it); adds the figure's smallest text to the
        output's metadata."""
        format_type = Unicode(TEXT_KEY)

        def __call__(self, obj):
            if not self.enabled or not isinstance(obj, Figure):
                return None
            record = smallest_text(obj)
            return None if record is None else (None, record)

    formatters = shell.display_formatter.formatters
    if not isinstance(formatters.get(TEXT_KEY), BaseFormatter):
        formatters[TEXT_KEY] = FigureText(parent=shell.display_formatter)
    return True
