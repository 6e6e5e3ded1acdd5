"""Reading notebooks for comparison (test helper)."""
from __future__ import annotations

import nbformat

from autograder.release import merged_streams

IGNORE_OUTPUT_TAG = "nbval-ignore-output"


def output_texts(cell) -> list[str] | None:
    """The text a code cell's outputs show (stream, text/plain, errors); None for a cell whose output nbval
    ignores (tag ``nbval-ignore-output``: a value that is random or a timing, never one that merely depends on
    the machine). Images are left out: their bytes differ between matplotlib builds, their text does not."""
    if cell.cell_type != "code" or IGNORE_OUTPUT_TAG in cell.metadata.get("tags", []):
        return None
    texts = []
    for out in merged_streams(cell.get("outputs", [])):  # one print may arrive in several chunks
        if out.output_type == "stream":
            texts.append(out.text)
        elif out.output_type in ("display_data", "execute_result"):
            texts.append(out.get("data", {}).get("text/plain", ""))
        elif out.output_type == "error":
            texts.append(f"{out.ename}: {out.evalue}")
    return texts


def comparable(path_or_nb) -> list[dict]:
    """What must not change between two generations of a release notebook: every cell's id, type, source
    and metadata, and the text of its outputs."""
    nb = path_or_nb if isinstance(path_or_nb, nbformat.NotebookNode) else nbformat.read(path_or_nb, as_version=4)
    cells = []
    for c in nb.cells:
        entry = {"id": c.get("id"), "type": c.cell_type, "source": c.source, "metadata": dict(c.metadata)}
        texts = output_texts(c)
        if texts is not None:
            entry["outputs"] = texts
        cells.append(entry)
    return cells


def first_difference(fresh: list[dict], stored: list[dict]) -> str:
    """A sentence naming the first cell that differs, and how, for a failure message."""
    if len(fresh) != len(stored):
        return f"{len(fresh)} cells now, {len(stored)} stored"
    for i, (a, b) in enumerate(zip(fresh, stored)):
        if a != b:
            what = next(k for k in ("id", "type", "source", "metadata", "outputs") if a.get(k) != b.get(k))
            head = (b.get("source") or "").strip().splitlines()[:1]
            return (f"cell {i} (id {b.get('id')!r}, starts {head[0][:60] if head else ''!r}) differs in its "
                    f"{what}:\n  now:    {str(a.get(what))[:400]}\n  stored: {str(b.get(what))[:400]}")
    return "no difference"
