"""A pytest plugin that writes nbval's verdict on every cell to a JSON file, for the self-check (:mod:`.selfcheck`).

nbval decides (it runs the notebook and compares outputs, with its own rules for what is compared); this plugin
only records what it decided, per code cell, so the self-check can name the cell, show both texts and point at
the exercise. The file is named by ``ATTENTION_COURSE_NBVAL_REPORT``; without it the plugin records nothing.
"""
from __future__ import annotations

import json
import os
import re

import pytest

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_differs: dict[int, dict] = {}
_cells: list[dict] = []


def output_text(outputs) -> str:
    """What a list of outputs shows as text: streams, ``text/plain`` values, and errors as ``Name: message``."""
    parts = []
    for out in outputs:
        kind = out.get("output_type")
        if kind == "stream":
            text = out.get("text", "")
            parts.append("".join(text) if isinstance(text, list) else text)
        elif kind in ("execute_result", "display_data"):
            text = out.get("data", {}).get("text/plain")
            if text is not None:
                parts.append(("".join(text) if isinstance(text, list) else text) + "\n")
        elif kind == "error":
            parts.append(f"{out.get('ename')}: {out.get('evalue')}\n")
    return "".join(parts)


def _error_line(traceback: str) -> str:
    """The last line of a kernel's traceback (``CheckFailed: rows should sum to 1 ...``), colours removed."""
    lines = [line.rstrip() for line in _ANSI.sub("", traceback or "").splitlines() if line.strip()]
    return lines[-1] if lines else ""


def pytest_configure(config):
    if not os.environ.get("ATTENTION_COURSE_NBVAL_REPORT"):
        return
    from nbval.plugin import IPyNbCell

    original = IPyNbCell.compare_outputs

    def compare_outputs(self, test, ref, skip_compare=None):
        same = original(self, test, ref, skip_compare)
        if not same:  # nbval found a difference: keep both sides for the report
            _differs[self.cell_num] = {"expected": output_text(ref), "got": output_text(test)}
        return same

    IPyNbCell.compare_outputs = compare_outputs


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not hasattr(item, "cell_num"):
        return
    entry = {"cell": item.cell_num, "passed": report.passed}
    if not report.passed:
        exc = call.excinfo.value if call.excinfo else None
        if item.cell_num in _differs:
            entry.update(kind="differs", **_differs[item.cell_num])
        else:
            entry.update(kind="error", message=str(exc),
                         error=_error_line(getattr(exc, "inner_traceback", "") or ""))
    _cells.append(entry)


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("ATTENTION_COURSE_NBVAL_REPORT")
    if path:
        with open(path, "w") as fh:
            json.dump({"cells": _cells}, fh)
