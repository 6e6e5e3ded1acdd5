"""The book's own style sheet is wired into the build and makes code cells wrap at the column width (the
browser test in tests/test_book.py checks the rendered pages; this one runs in the unit loop)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
SPHINX = yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]


def test_the_style_sheet_is_served_and_linked():
    static = [ROOT / p for p in SPHINX["html_static_path"]]
    for css in SPHINX["html_css_files"]:
        assert any((d / css).is_file() for d in static), f"{css} is not in any html_static_path folder"
    assert "wrap-code.css" in SPHINX["html_css_files"]


def test_code_cells_and_outputs_wrap():
    css = (ROOT / "book_static" / "wrap-code.css").read_text()
    rules = dict(re.findall(r"([^{}]+)\{([^}]*)\}", re.sub(r"/\*.*?\*/", "", css, flags=re.S)))
    wrapping = [sel for sel, body in rules.items() if re.search(r"white-space:\s*pre-wrap", body)]
    selectors = {s.strip() for sel in wrapping for s in sel.split(",")}
    for needed in ("div.cell div.cell_input pre", "div.cell div.cell_output pre"):
        assert needed in selectors, f"{needed} does not wrap"
