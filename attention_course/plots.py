"""Figures that several chapters draw."""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator


def show_heatmaps(matrices, titles=None, xlabel="keys", ylabel="queries", cmap="Reds", figsize_per=2.8):
    """Draw a row of attention-weight heatmaps.

    Args:
        matrices: a tensor or array of shape (n, rows, cols), one heatmap each (on any device).
        titles: optional list of n titles.
    """
    import torch

    if torch.is_tensor(matrices):
        matrices = matrices.detach().cpu().numpy()
    n = len(matrices)
    fig, axes = plt.subplots(1, n, figsize=(figsize_per * n + 0.8, figsize_per), squeeze=False)
    for i, ax in enumerate(axes[0]):
        image = ax.imshow(matrices[i], cmap=cmap, vmin=0.0, vmax=max(float(matrices[i].max()), 1e-12))
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # rows and columns are positions
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(xlabel)
        if i == 0:
            ax.set_ylabel(ylabel)
        if titles:
            ax.set_title(titles[i])
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
    plt.show()
