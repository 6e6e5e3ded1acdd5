"""The shared figure helper tells the truth about the kind of data it draws: yes/no data (masks, receptive
fields) in two flat colours with a legend and no colour bar, weights on a colour bar."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # no display; plt.show() leaves the figure open for inspection

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from attention_course.plots import BOOLEAN_COLOURS, plot_attention_grid  # noqa: E402

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _close_figures():
    plt.close("all")
    yield
    plt.close("all")


def _colour_bars(fig):
    return [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]


def test_boolean_maps_get_two_colours_a_legend_and_no_colour_bar():
    mask = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
    plot_attention_grid(torch.stack([mask, ~mask]), titles=["causal", "its complement"], boolean=True,
                        legend=("masked", "attends"))
    fig = plt.gcf()
    assert not _colour_bars(fig), "a boolean map must not promise in-between values with a colour bar"
    assert len(fig.legends) == 1
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["masked", "attends"]
    panel = fig.axes[0].get_images()[0]
    # Every pixel is one of the two legend colours, True where the mask is True.
    rgba = panel.to_rgba(panel.get_array(), bytes=False)[..., :3]
    false_rgb, true_rgb = (np.array(matplotlib.colors.to_rgb(c)) for c in BOOLEAN_COLOURS)
    assert np.allclose(rgba[mask.numpy()], true_rgb)
    assert np.allclose(rgba[~mask.numpy()], false_rgb)


def test_weights_keep_their_colour_bar_and_have_no_legend():
    plot_attention_grid(torch.softmax(torch.randn(2, 4, 4), dim=-1), titles=["a", "b"])
    fig = plt.gcf()
    assert len(_colour_bars(fig)) == 1
    assert not fig.legends
    # Readable at the book's width, where a row of panels is drawn at about 0.7 of its size.
    ax = fig.axes[0]
    assert ax.title.get_fontsize() >= 12 and ax.xaxis.label.get_fontsize() >= 12
    assert all(t.get_fontsize() >= 11 for t in ax.get_xticklabels())


def test_boolean_mode_refuses_data_that_is_not_yes_or_no():
    with pytest.raises(ValueError, match="0/1"):
        plot_attention_grid(torch.full((1, 3, 3), 0.5), boolean=True)


def test_in_a_notebook_each_heatmap_records_its_mode_for_the_book_walk(monkeypatch):
    """Under the inline backend the figure goes out through IPython's display with a record of how it was drawn
    (tests/test_book_walk.py reads it from the stored notebooks to find yes/no data on a colour bar)."""
    import IPython.display

    from attention_course import plots

    shown = []
    monkeypatch.setattr(plots.matplotlib, "get_backend", lambda: "module://matplotlib_inline.backend_inline")
    monkeypatch.setattr(IPython.display, "display", lambda fig, metadata: shown.append((fig, metadata)))
    mask = torch.tensor([[True, False], [True, True]])
    plot_attention_grid(mask[None], boolean=True)
    plot_attention_grid(mask[None].float())  # yes/no data drawn as weights: the record says so
    plot_attention_grid(torch.softmax(torch.randn(1, 3, 3), dim=-1))
    records = [metadata[plots.RECORD_KEY] for _, metadata in shown]
    assert records == [{"mode": "boolean", "colour_bars": 0, "yes_no_data": True},
                       {"mode": "weights", "colour_bars": 1, "yes_no_data": True},
                       {"mode": "weights", "colour_bars": 1, "yes_no_data": False}]
    assert not plt.get_fignums(), "a displayed figure is closed, so the inline backend does not show it twice"


def test_a_figure_records_its_smallest_text_in_points_and_stored_pixels():
    """The book walk's 10 px floor reads this: the smallest visible text, in points and in pixels of the PNG."""
    from attention_course.plots import smallest_text

    fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
    ax.plot([0, 1], [0, 1])
    ax.set_title("a title", fontsize=14)
    ax.set_xlabel("the small label", fontsize=7)
    ax.text(0.5, 0.5, "hidden", fontsize=3).set_visible(False)  # not drawn, not counted
    assert smallest_text(fig) == {"points": 7.0, "pixels": 9.72, "text": "the small label"}
    assert smallest_text(plt.figure()) is None


def test_in_a_notebook_every_figure_carries_its_smallest_text(monkeypatch):
    """Registered once per kernel (runtime.start_chapter), the record rides in the output's metadata of every
    figure IPython formats, with no data of its own for the book to render."""
    from IPython.core.formatters import DisplayFormatter

    from attention_course import plots

    class Shell:
        display_formatter = DisplayFormatter()

    shell = Shell()
    assert plots.record_figure_text(shell) and plots.record_figure_text(shell)  # twice: still one formatter
    fig, ax = plt.subplots(figsize=(3, 2), dpi=100)
    ax.set_xlabel("x", fontsize=12)
    ax.tick_params(labelsize=9)
    data, metadata = shell.display_formatter.format(fig)
    assert plots.TEXT_KEY not in data
    assert metadata[plots.TEXT_KEY] == {"points": 9.0, "pixels": 12.5, "text": "0.0"}
    assert plots.record_figure_text() is False  # outside IPython: nothing to do
