"""The one place a notebook picks its device and seeds its random number generators."""
from __future__ import annotations

import os
import random

import numpy as np
import torch

from .plots import record_figure_text

_chapter: str | None = None


def best_device() -> torch.device:
    """CUDA when present (and not disabled by ``ATTENTION_COURSE_DEVICE``), else CPU."""
    wanted = os.environ.get("ATTENTION_COURSE_DEVICE")
    if wanted:
        return torch.device(wanted)
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def start_chapter(chapter: str, seed: int = 0) -> torch.device:
    """Called once by each chapter's setup cell: seeds everything and returns the device to use.

    TF32 is switched off so that float32 results on a GPU stay within the course's float32 tolerances. In a
    notebook, every figure shown from here on records its smallest text (``plots.record_figure_text``: the built
    book checks that it stays readable at the column's width).
    """
    global _chapter
    _chapter = chapter
    record_figure_text()
    seed_everything(seed)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    return best_device()


def current_chapter() -> str | None:
    return _chapter
