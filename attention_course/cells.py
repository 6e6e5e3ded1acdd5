"""How the course classifies notebook cells (nbgrader metadata plus our ``setup`` tag)."""
from __future__ import annotations

import zlib

SETUP_TAG = "setup"
RECORD_MIME = "application/vnd.attention-course.check+json"


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def is_setup(cell) -> bool:
    return cell.get("cell_type") == "code" and SETUP_TAG in cell.get("metadata", {}).get("tags", [])


def is_solution(cell) -> bool:
    return cell.get("cell_type") == "code" and bool(nbgrader_meta(cell).get("solution"))


def is_graded_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_graded_run(cell) -> bool:
    """A code cell that grading runs: setup, solution or graded test. The rest (demos, figures, training
    runs that only illustrate) never feed a graded check: the reference run skips them and still passes."""
    return cell.cell_type == "code" and (is_setup(cell) or is_solution(cell) or is_graded_test(cell))


# Every graded test cell starts from the same random state, whatever ran (or failed) before it, wherever it runs:
# Checks seeds it in a learner's kernel and under stock nbgrader, the grading engine seeds it in the sandbox (for
# the learner and for the reference profile, the one reference run). So all of them draw identical inputs and the
# reference values stock nbgrader looks up are the engine's. The engine re-runs the reference with other bases
# to find expected values that depend on the seed (autograder/isolation.py).
GRADING_SEED_BASE = 1_000_003


def cell_seed(grade_id: str, base: int = GRADING_SEED_BASE) -> int:
    """The seed a graded test cell starts from (``random``, NumPy and torch alike)."""
    return (base + zlib.crc32(grade_id.encode())) % (2 ** 31)


def grade_id(cell) -> str | None:
    return nbgrader_meta(cell).get("grade_id")


def records_in(cell) -> list[dict]:
    """Check records a cell's outputs carry, in order."""
    found = []
    for out in cell.get("outputs", []):
        if out.get("output_type") in ("display_data", "execute_result"):
            rec = out.get("data", {}).get(RECORD_MIME)
            if isinstance(rec, dict):
                found.append(rec)
    return found


def points(cell) -> float:
    return float(nbgrader_meta(cell).get("points", 0) or 0)


def graded_cells(nb) -> list[tuple[str, float]]:
    """The graded test cells of a notebook, in order, with their points: ``[(grade_id, points), ...]``.

    The one definition of what a chapter grades and of its maximum score (``sum`` of the points).
    """
    return [(grade_id(c), points(c)) for c in nb.cells if is_graded_test(c)]
