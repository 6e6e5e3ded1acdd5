"""Reading notebooks for comparison (test helper)."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import nbformat
from nbval.plugin import IPyNbFile, coalesce_streams

from autograder.release import merged_streams

IGNORE_OUTPUT_TAG = "nbval-ignore-output"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")  # nbval colours its report when pytest may


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


def nbval_failures(fresh, committed, session) -> list[str]:
    """nbval's verdict on ``fresh`` (an executed notebook or its path) as if nbval had just run it against the
    stored outputs of ``committed`` (a release notebook's path): one sentence per cell nbval would fail, naming it.

    nbval's own code decides: its collector reads ``committed`` (so its ``nbval-ignore-output``, ``nbval-skip`` and
    ``raises-exception`` tags and ``# NBVAL_...`` comments apply, as for a learner), and each cell's
    ``IPyNbCell.compare_outputs`` compares the fresh outputs with the stored ones, with nbval's default skips (figures
    by their text, no metadata or execution counts) and the sanitisers the learner's self-check uses (none:
    ``python -m attention_course check`` passes no ``--nbval-sanitize-with``). What nbval's ``runtest`` does after
    a cell ran is done here in the same order; only the execution is not nbval's: the outputs are ``fresh``'s.
    ``session`` is the running pytest session (nbval's collector reads its options)."""
    collector = IPyNbFile.from_parent(session, path=Path(committed))
    collector.setup_sanitize_files()  # what nbval's setup does besides starting a kernel
    fresh = fresh if isinstance(fresh, nbformat.NotebookNode) else nbformat.read(fresh, as_version=4)
    ran = {c.get("id"): c for c in fresh.cells if c.cell_type == "code"}
    failures = []
    for item in collector.collect():
        head = (item.cell.source.strip().splitlines() or [""])[0][:60]
        where = f"Cell {item.cell_num} (id {item.cell.get('id')!r}, starts {head!r})"
        if item.options["skip"]:
            continue
        cell = ran.get(item.cell.get("id"))
        if cell is None:
            failures.append(f"{where}: not in the fresh run")
            continue
        outs = coalesce_streams(copy.deepcopy(cell.get("outputs", [])))
        errors = [o for o in outs if o.output_type == "error"]
        if errors and not item.options["check_exception"]:
            failures.append(f"{where}: Cell execution caused an exception: {errors[0].ename}: {errors[0].evalue}")
            continue
        unrun = item.cell.execution_count is None
        if unrun and item.cell.outputs:
            failures.append(f"{where}: Unrun reference cell has outputs")
        elif item.options["check"] and not unrun:
            if not item.compare_outputs(outs, coalesce_streams(copy.deepcopy(item.cell.outputs))):
                failures.append(f"{where}: Cell outputs differ\n"
                                + _ANSI.sub("", "\n".join(item.comparison_traceback)))
    return failures
