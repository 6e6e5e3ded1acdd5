"""The check library that every graded test cell calls.

A test cell creates ``check = Checks("<its grade_id>")`` and calls one method per check. Each call

1. encodes the learner's value (``got``) and the test's parameters with :mod:`.encoding` (no pickle),
2. emits them as a display record (MIME ``application/vnd.attention-course.check+json``, with a
   one-line text fallback the learner sees),
3. decides it as the kind's row of :mod:`.kinds` says (a verdict of :mod:`.verdicts`) and raises :class:`CheckFailed` naming the symptom.

Step 3 gives instant feedback in the learner's kernel and makes stock ``nbgrader autograde`` work. Step 2
lets a trusted grader re-decide every check outside the kernel: it takes ``got`` from the learner's
record and everything else (parameters, reference values) from a clean run of the solution notebook, so
nothing patched inside the kernel changes the verdict.

``matches_reference`` compares with the reference solution's output on the same inputs; it belongs in
hidden tests only, since learners do not have the solutions. The environment variable
``ATTENTION_COURSE_GRADING`` selects how it is decided: unset (look the reference value up, building the
expectations from ``solutions/`` on first use), ``reference`` (this *is* the reference run: record only)
or ``sandbox`` (record only; the trusted grader decides).
"""
from __future__ import annotations

import os

from .cells import RECORD_MIME, cell_seed
from .encoding import decode, encode
from .kinds import REGISTRY, call_outcome, decide
from .language import hint as translated_hint
from .language import tr
from .runtime import current_chapter, seed_everything
from .verdicts import either


class CheckFailed(AssertionError):
    """A check did not hold; the message names the symptom."""


def _emit(record: dict, text: str) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:  # plain Python: the exception (if any) is the feedback
        return
    if get_ipython() is None:
        return
    display({RECORD_MIME: record, "text/plain": text}, raw=True)


def torch_device_type(value) -> str | None:
    import torch

    return torch.Tensor.detach(value).device.type if isinstance(value, torch.Tensor) else None


def grading_mode() -> str:
    return os.environ.get("ATTENTION_COURSE_GRADING", "")


def grading_seed(cell_id: str) -> int:
    """The seed of a test cell whose inputs the grader chooses at grading time (a memory budget's cell draws the
    sizes it runs at from it, so that no notebook can know them): in the sandbox, the seed the engine gave the
    cell; under stock nbgrader or in a reference run, the one the reference profile records for it; elsewhere (a
    kernel with no grader) the cell's own seed. Call it as a plain function, not on the Checks object."""
    if os.environ.get("ATTENTION_COURSE_CELL_SEEDING") == "engine":
        import torch

        return torch.initial_seed()
    from .expected import drawn_seed

    seed = drawn_seed(current_chapter(), cell_id)
    return cell_seed(cell_id) if seed is None else seed


class Checks:
    """The checks of one graded test cell; ``cell_id`` must equal the cell's nbgrader ``grade_id``."""

    def __init__(self, cell_id: str):
        self.cell_id = cell_id
        self._seen: set[str] = set()
        # The cell's seed (attention_course.cells.cell_seed), so the learner's kernel and stock nbgrader draw
        # the inputs the grading engine's reference run drew. (In the sandbox the engine seeds each test cell
        # itself, with the same seed, before the cell runs.)
        if os.environ.get("ATTENTION_COURSE_CELL_SEEDING") != "engine":
            seed_everything(cell_seed(cell_id))

    def _run(self, check_id: str, kind: str, got, params: dict, describe: str | None) -> None:
        spec = REGISTRY[kind]
        if check_id in self._seen:
            raise ValueError(f"check id {check_id!r} used twice in cell {self.cell_id!r}")
        self._seen.add(check_id)
        describe = translated_hint(describe) or tr(spec.describe, check_id=check_id,
                                  **{k: either(v) if k == "types" else v for k, v in params.items()})
        got_enc = encode(got)
        params_enc = {k: encode(v) if k == spec.expected else v for k, v in params.items()}
        record = {"cell": self.cell_id, "check": check_id, "kind": kind, "got": got_enc, "params": params_enc}
        if grading_mode() == "reference" and torch_device_type(got) == "meta":
            # A device audit: values do not exist on the meta device; only where results live is checked.
            _emit(record, tr("recorded: {check}", check=describe))
            return
        if spec.needs_reference and grading_mode() in ("reference", "sandbox"):
            _emit(record, tr("recorded: {check}", check=describe))
            return
        reference = None
        if spec.needs_reference:
            from .expected import reference_value

            reference = reference_value(current_chapter(), self.cell_id, check_id)
        like = None
        if os.environ.get("NBGRADER_EXECUTION") == "autograde":
            # Stock nbgrader, run where the solutions are: the learner's value must have the form of the
            # reference's value for this check, as on the trusted side (autograder/trusted.py), so `grade` and
            # stock nbgrader agree (a 0-d tensor where the reference returns a float fails under both). A
            # learner's own kernel has no reference: the expected value's form decides there (verdicts.py).
            from .expected import reference_expected, reference_form

            like = reference_form(current_chapter(), self.cell_id, check_id, kind)
            # ... and the expected value is the reference's, as on the trusted side, wherever that side takes it
            # from the reference (everywhere but a self-consistency site).
            held = reference_expected(current_chapter(), self.cell_id, check_id, kind, spec.expected) \
                if spec.expected else None
            if held is not None:
                params_enc = {**params_enc, spec.expected: held}
        decoded_params = {k: decode(v) if k == spec.expected else v for k, v in params_enc.items()}
        verdict = decide(kind, decode(got_enc), decoded_params, reference, like)
        _emit(record, ("✓ " if verdict.passed else "✗ ") + describe)
        if not verdict.passed:
            raise CheckFailed(tr("{check}: {problem}", check=describe, problem=verdict.message))

    def __getattr__(self, name: str):
        """A kind without a hand-written method below is still callable as ``check.<kind>(check_id, *args,
        hint=..., describe=..., **options)``, its arguments as its row in :mod:`.kinds` lists them: adding a
        kind is a row there and a verdict in :mod:`.verdicts`."""
        spec = REGISTRY.get(name)
        if spec is None or name.startswith("_") or spec.calls:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

        def method(check_id: str, *values, hint: str = "", describe: str | None = None, **options):
            if len(values) != len(spec.args):
                raise TypeError(f"check.{name} takes a check id and {len(spec.args)} values: {', '.join(spec.args)}")
            unknown = set(options) - set(spec.options)
            if unknown:
                raise TypeError(f"check.{name} has no option {', '.join(sorted(unknown))}")
            params = {**dict(zip(spec.args[1:], values[1:])), **options, "hint": hint}
            self._run(check_id, name, values[0], params, describe)

        return method

    def close(self, check_id: str, got, want, *, rtol=None, atol=None, hint: str = "",
              check_dtype: bool = True, describe: str | None = None) -> None:
        """``got`` equals ``want`` within the dtype's tolerance (shape, dtype and NaN pattern too)."""
        self._run(check_id, "close", got, {"want": want, "rtol": rtol, "atol": atol, "hint": hint,
                                           "check_dtype": check_dtype}, describe)

    def matches_reference(self, check_id: str, got, *, rtol=None, atol=None, hint: str = "",
                          check_dtype: bool = True, describe: str | None = None) -> None:
        """``got`` equals the reference solution's value for the same expression (hidden tests only)."""
        self._run(check_id, "matches_reference", got,
                  {"rtol": rtol, "atol": atol, "hint": hint, "check_dtype": check_dtype}, describe)

    def equals(self, check_id: str, got, want, *, hint: str = "", describe: str | None = None) -> None:
        """``got`` is the plain Python value ``want`` (a yes/no answer, a count): same type, same value.

        Prefer it to ``true(f(x) is True)``: under the isolated grader ``want`` never exists in the learner's
        process, so neither the function nor the test line can tell which answer is expected.
        """
        self._run(check_id, "equals", got, {"want": want, "hint": hint}, describe)

    def sums_to_one(self, check_id: str, weights, *, dim: int = -1, hint: str = "",
                    describe: str | None = None) -> None:
        self._run(check_id, "sums_to_one", weights, {"dim": dim, "hint": hint}, describe)

    def shape(self, check_id: str, got, shape, *, hint: str = "", describe: str | None = None) -> None:
        self._run(check_id, "shape", got, {"shape": [int(s) for s in shape], "hint": hint},
                  describe or tr("{check_id}: shape is {shape}", check_id=check_id, shape=tuple(shape)))

    def finite(self, check_id: str, got, *, hint: str = "", describe: str | None = None) -> None:
        self._run(check_id, "finite", got, {"hint": hint}, describe)

    def true(self, check_id: str, condition, *, hint: str = "", describe: str | None = None) -> None:
        """A plain ``True``; prefer the numeric checks, whose values the grader can re-examine."""
        self._run(check_id, "true", condition, {"hint": hint}, describe)

    def raises(self, check_id: str, fn, *args, types=(ValueError, TypeError), match: str | None = None,
               hint: str = "", describe: str | None = None, **kwargs) -> None:
        """Calling ``fn(*args, **kwargs)`` raises one of ``types`` whose message mentions ``match``."""
        names = [t.__name__ for t in types]
        self._run(check_id, "raises", call_outcome(fn, args, kwargs), {"types": names, "match": match, "hint": hint},
                  describe or tr("{check_id}: bad input is rejected with {types}", check_id=check_id,
                                 types=either(names)))
