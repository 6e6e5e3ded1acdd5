"""A solution cell whose ``nn.Module`` classes start from other parameters: the one owner of "re-initialised".

The spec fixes no initialisation for a weight matrix (nor for the bias of a layer that has one), so a
correct learner may start them anywhere. Two places need the reference with other starting parameters:

- the engine's profile build (:mod:`autograder.isolation`) runs the reference once more, re-initialised, and
  any check whose *expected value* changes is computed from the learner's own parameters (a self-consistency
  site: "the output at position t does not change when later tokens do"), so its expected value must come
  from the learner's run, not the reference's;
- ``tests/test_initialisation.py`` grades the re-initialised reference and expects full marks, which catches
  a check whose *answer* depends on the starting parameters without being told what they are.

What the spec does fix stays: vectors that are not a matrix layer's bias (a norm's gain and shift, set to ones
and zeros by contract) and scalars (chapter 2's ``w``, set by ``init_w``).
"""
from __future__ import annotations

import ast

RECIPES = ("xavier", "normal")  # torch's attention recipe (xavier matrices, zero biases); small normal (std 0.02)

_RUNTIME = '''

# re-initialised ({recipe}) by autograder/reinitialise.py: a correct module that starts from other parameters
def __reinitialise__(cls, recipe):
    import functools

    import torch

    init = cls.__init__

    @functools.wraps(init)
    def reinitialised(self, *args, **kwargs):
        init(self, *args, **kwargs)
        params = dict(self.named_parameters())
        with torch.no_grad():
            for name, p in params.items():
                owner = params.get(name[: -len("bias")] + "weight") if name.endswith("bias") else None
                if p.dim() >= 2:
                    if recipe == "xavier":
                        torch.nn.init.xavier_uniform_(p)
                    else:
                        torch.nn.init.normal_(p, std=0.02)
                elif owner is not None and owner.dim() >= 2:  # the bias of a matrix layer (not of a norm)
                    if recipe == "xavier":
                        torch.nn.init.zeros_(p)
                    else:
                        torch.nn.init.normal_(p, std=0.02)

    cls.__init__ = reinitialised
'''


def module_classes(source: str) -> list[str]:
    """The ``nn.Module`` subclasses a cell defines at top level."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return []
    return [n.name for n in body if isinstance(n, ast.ClassDef)
            and any(ast.unparse(b) in ("nn.Module", "torch.nn.Module", "Module") for b in n.bases)]


def reinitialised(source: str, recipe: str) -> str:
    """``source`` with every module class it defines re-initialised by ``recipe`` after its own ``__init__``
    (unchanged when it defines none)."""
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r} (one of {', '.join(RECIPES)})")
    classes = module_classes(source)
    if not classes:
        return source
    return (source.rstrip("\n") + _RUNTIME.format(recipe=recipe)
            + "".join(f"__reinitialise__({name}, {recipe!r})\n" for name in classes))
