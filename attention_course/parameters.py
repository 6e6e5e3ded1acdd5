"""How the tests hand parameters to a learner's module: random values that depend on what the test chooses, never
on how the module was built.

One draw rule for every chapter: matrices and embedding tables ~ N(0, 1/columns), norm weights (gains) near 1,
biases near 0. A test then notices a weight or bias that is ignored, and the values stay in the range where
attention and normalisation behave as they do in a trained model.
"""
from __future__ import annotations

import math
import zlib

import torch


def _fill_(name: str, p: torch.Tensor, noise: torch.Tensor, scale: float) -> None:
    """Overwrite ``p`` (named ``name`` in its module) from standard normal ``noise`` of its shape."""
    if p.dim() >= 2:
        p.copy_(noise / math.sqrt(p.shape[-1]))
    elif name.endswith("weight"):  # a norm's gain
        p.copy_(1.0 + scale * noise)
    else:
        p.copy_(scale * noise)


def randomize_(module: torch.nn.Module, generator: torch.Generator, scale: float = 0.5) -> torch.nn.Module:
    """Overwrite every parameter of ``module``, in creation order, with draws from ``generator`` (a CPU one:
    the numbers are the same on every device) by the module's draw rule. Returns ``module``."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            _fill_(name, p, torch.randn(p.shape, generator=generator, dtype=p.dtype).to(p.device), scale)
    return module


def set_parameters_(module: torch.nn.Module, seed: int, scale: float = 0.5) -> torch.nn.Module:
    """Give every parameter values drawn from its own name and ``seed`` alone, by the same rule as
    ``randomize_``. Returns ``module``.

    Only the names count, not the order a module creates its parameters in: two modules that follow the same
    naming contract hold the same numbers, so their outputs can be compared. This is how a test hands the
    reference's parameters to your module.
    """
    with torch.no_grad():
        for name, p in module.named_parameters():
            g = torch.Generator().manual_seed(seed * 1_000_003 + zlib.crc32(name.encode()))
            _fill_(name, p, torch.randn(p.shape, generator=g, dtype=p.dtype).to(p.device), scale)
    return module
