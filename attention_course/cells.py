"""How the course classifies notebook cells (nbgrader metadata plus our ``setup`` tag)."""
from __future__ import annotations

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
