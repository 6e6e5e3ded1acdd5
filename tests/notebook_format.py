"""Reading notebooks for comparison (test helper)."""
from __future__ import annotations

import nbformat

IGNORE_OUTPUT_TAG = "nbval-ignore-output"


def comparable(path) -> list[dict]:
    """What must not change between two generations of a release notebook: every cell's type, source
    and metadata, and the text of its outputs (images and nondeterministic cells excepted)."""
    nb = nbformat.read(path, as_version=4)
    cells = []
    for c in nb.cells:
        entry = {"type": c.cell_type, "source": c.source, "metadata": dict(c.metadata)}
        if c.cell_type == "code" and IGNORE_OUTPUT_TAG not in c.metadata.get("tags", []):
            texts = []
            for out in c.get("outputs", []):
                if out.output_type == "stream":
                    texts.append(out.text)
                elif out.output_type in ("display_data", "execute_result"):
                    texts.append(out.get("data", {}).get("text/plain", ""))
                elif out.output_type == "error":
                    texts.append(f"{out.ename}: {out.evalue}")
            entry["outputs"] = texts
        cells.append(entry)
    return cells
