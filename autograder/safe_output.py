"""What of a learner's notebook may be rendered for the instructor (issue 24, class 1).

The autograded notebook (``grading/autograded/<student>/<chapter>/<chapter>.ipynb``) is opened by formgrader,
which renders it with nbconvert's HTML templates inside the instructor's logged-in Jupyter session, and by
JupyterLab. nbconvert does not sanitise by default: an HTML, JavaScript, SVG or markdown output, raw HTML in a
markdown cell, or an image's ``width`` metadata (written unquoted into an ``<img>`` tag) would run the learner's
script with the instructor's rights. So everything the learner controls passes through this module before it is
written, and only what cannot carry active content survives:

- outputs: the MIME types of :data:`KEEP_TEXT` as plain text, our own check records (:data:`RECORD_MIME`, JSON
  data no front-end renders), and raster images (:data:`RASTER`) whose base64 decodes to a file of the right
  kind within :data:`MAX_IMAGE_BYTES`. Any other type (HTML, JavaScript, SVG, markdown, LaTeX, JSON, widget views,
  anything unknown) becomes plain text behind a ``[removed by the grader: <mime> output]`` note, so the
  instructor still sees what the learner tried and nothing renders it. Text loses ANSI escapes and control
  characters (they could hide or reorder text). Output metadata keeps only an image's numeric size.
- cells: metadata is cut to :data:`CELL_METADATA` (front-ends act on others: widget state, raw cells' formats,
  file names), attachments to valid raster images; a markdown or raw cell whose text is not one of the chapter's
  own (the source's or the release's) is shown as a fenced code block: its text is readable, never rendered as
  markdown, HTML or LaTeX (MathJax skips code blocks).
- the notebook: metadata is cut to :data:`NOTEBOOK_METADATA` (no widget state, no trust signature).

Why learner markdown becomes a code block rather than escaped markdown: escaping ``<`` and ``>`` still leaves
markdown's own active parts (``javascript:`` links, MathJax's ``\\href``, remote images that report the viewer);
a code block leaves none, and formgrader still shows every character the learner wrote.

:data:`CSP` is the Content-Security-Policy of every HTML page the grader writes (feedback pages, class report).
"""
from __future__ import annotations

import base64
import binascii
import copy
import functools
import json
import os
import re
from pathlib import Path

from attention_course.cells import RECORD_MIME

# -- policy (data) ------------------------------------------------------------------------------------------------

# No script, no remote anything: inline styles and data: images (the report's figures) only.
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'

KEEP_TEXT = frozenset({"text/plain"})
KEEP_RECORD = frozenset({RECORD_MIME})  # the check library's records: read by the trusted side, never rendered
RASTER = {"image/png": (b"\x89PNG\r\n\x1a\n",), "image/jpeg": (b"\xff\xd8\xff",)}
MAX_IMAGE_BYTES = 4 << 20  # decoded; a matplotlib figure is a few hundred kB
MAX_REMOVED_CHARS = 4000  # of a removed output's text shown to the instructor
IMAGE_SIZE_KEYS = ("width", "height")

# Cell metadata a front-end may read, with the shape it must have; everything else (widgets, raw_mimetype,
# format, filenames, trusted, ...) is dropped. ``nbgrader`` is the grader's own copy (structure.repair).
CELL_METADATA = {"nbgrader": dict, "tags": list, "editable": bool, "deletable": bool, "collapsed": bool,
                 "scrolled": (bool, str), "jupyter": dict}
JUPYTER_FLAGS = ("source_hidden", "outputs_hidden")
GRADE_ID = re.compile(r"[A-Za-z0-9_-]{1,200}")  # what nbgrader itself accepts as a grade_id
NOTEBOOK_METADATA = ("kernelspec", "language_info")

NOTE = "[removed by the grader: {mime} output{why}]"
LEARNER_TEXT_NOTE = ("*A cell the learner wrote, shown as plain text by the grader "
                     "(its markdown, HTML and LaTeX are not rendered):*")

# ANSI/VT escape sequences (CSI, OSC, and two-character ESC forms), then every control character left but tab
# and newline: C0, DEL, C1, and the bidirectional overrides that reorder how text reads.
_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])")
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


# -- text and images ----------------------------------------------------------------------------------------------


def plain_text(value) -> str:
    """Text for display: nbformat's list-of-lines joined, ANSI escapes and control characters removed."""
    if isinstance(value, list):
        value = "".join(v if isinstance(v, str) else str(v) for v in value)
    elif not isinstance(value, str):
        value = str(value)
    return _CONTROL.sub("", _ANSI.sub("", value.replace("\r\n", "\n")))


def raster_image(mime: str, value) -> tuple[str | None, str]:
    """(base64 without whitespace, "") for an image of type ``mime``, else (None, why it was refused)."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = "".join(value)
    if not isinstance(value, str):
        return None, "not base64 text"
    compact = "".join(value.split())
    if len(compact) > (MAX_IMAGE_BYTES * 4) // 3 + 4:
        return None, f"larger than {MAX_IMAGE_BYTES >> 20} MiB"
    # Only the base64 alphabet can reach the data: URL, and the first bytes must be the format's signature.
    # The rest is not decoded (a 10 MB notebook of figures would cost a quarter of a second): a corrupt body
    # inside valid base64 is an image the browser fails to draw, nothing more.
    if len(compact) % 4 or not _BASE64.fullmatch(compact):
        return None, "not valid base64"
    try:
        head = base64.b64decode(compact[:16], validate=True)
    except (binascii.Error, ValueError):
        return None, "not valid base64"
    if not head.startswith(RASTER[mime]):
        return None, f"not a {mime.split('/')[1].upper()} image"
    return compact, ""


def _removed_text(value) -> str:
    text = value if isinstance(value, (str, list)) else json.dumps(value, ensure_ascii=False, default=str)
    text = plain_text(text)
    if len(text) > MAX_REMOVED_CHARS:
        text = text[:MAX_REMOVED_CHARS] + f"... [{len(text) - MAX_REMOVED_CHARS} more characters]"
    return text


def _image_metadata(meta) -> dict:
    """Only an image's numeric width and height: nbconvert writes them unquoted into the ``<img>`` tag."""
    out = {}
    if isinstance(meta, dict):
        for key in IMAGE_SIZE_KEYS:
            v = meta.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 100_000:
                out[key] = v
    return out


# -- outputs ------------------------------------------------------------------------------------------------------


def safe_data(data: dict, metadata=None) -> tuple[dict, dict]:
    """(data, metadata) of a rich output with only inert MIME types left; the rest as text behind a note."""
    metadata = metadata if isinstance(metadata, dict) else {}
    kept, meta, notes = {}, {}, []
    for mime in sorted(k for k in data if isinstance(k, str)):
        value = data[mime]
        if mime in KEEP_TEXT:
            continue  # joined with the notes below
        if mime in KEEP_RECORD and isinstance(value, dict):
            kept[mime] = value
        elif mime in RASTER:
            b64, why = raster_image(mime, value)
            if b64 is None:
                notes.append(NOTE.format(mime=plain_text(mime)[:100], why=f" ({why})"))
                continue
            kept[mime] = b64
            size = _image_metadata(metadata.get(mime))
            if size:
                meta[mime] = size
        else:
            notes.append(NOTE.format(mime=plain_text(mime)[:100], why=", shown as text") + "\n" + _removed_text(value))
    text = plain_text(data["text/plain"]) if "text/plain" in data else ""
    if notes:
        text = "\n".join(([text] if text else []) + notes)
    if text or "text/plain" in data:
        kept["text/plain"] = text
    return kept, meta


def safe_output(o: dict) -> dict | None:
    """One output in nbformat shape with nothing a front-end would run; None for what is not an output.

    ``update_display_data`` (which nbformat does not store) becomes a ``display_data`` with the same
    treatment."""
    if not isinstance(o, dict):
        return None
    kind = o.get("output_type")
    if kind == "stream":
        name = o.get("name") if o.get("name") in ("stdout", "stderr") else "stdout"
        return {"output_type": "stream", "name": name, "text": plain_text(o.get("text", ""))}
    if kind in ("display_data", "execute_result", "update_display_data"):
        data = o.get("data") if isinstance(o.get("data"), dict) else {}
        data, meta = safe_data(data, o.get("metadata"))
        out = {"output_type": "execute_result" if kind == "execute_result" else "display_data",
               "data": data, "metadata": meta}
        if kind == "execute_result":
            ec = o.get("execution_count")
            out["execution_count"] = ec if isinstance(ec, int) and not isinstance(ec, bool) else None
        return out
    if kind == "error":
        tb = o.get("traceback") if isinstance(o.get("traceback"), list) else []
        return {"output_type": "error", "ename": plain_text(o.get("ename", "Error")),
                "evalue": plain_text(o.get("evalue", "")), "traceback": [plain_text(line) for line in tb]}
    return None


# -- cells and notebooks ------------------------------------------------------------------------------------------


def _norm(text) -> str:
    """A cell's text as compared with the chapter's own: trailing spaces and blank edge lines do not count (as in
    structure.repair's comparison of read-only cells), so a release cell saved by an editor still matches."""
    text = "".join(text) if isinstance(text, list) else str(text)
    return "\n".join(line.rstrip() for line in text.replace("\r\n", "\n").split("\n")).strip("\n")


def cell_metadata(meta) -> dict:
    out = {}
    if not isinstance(meta, dict):
        return out
    for key, kind in CELL_METADATA.items():
        v = meta.get(key)
        if v is None or not isinstance(v, kind):
            continue
        if key == "nbgrader":
            v = _nbgrader_metadata(v)
            if v is None:
                continue
        elif key == "tags":
            v = [plain_text(t)[:100] for t in v if isinstance(t, str)]
        elif key == "jupyter":
            v = {k: v[k] for k in JUPYTER_FLAGS if isinstance(v.get(k), bool)}
        elif key == "scrolled" and isinstance(v, str):
            v = "auto"
        out[key] = copy.deepcopy(v)
    return out


def _nbgrader_metadata(meta: dict) -> dict | None:
    """nbgrader's cell metadata with scalar values only, or None when its grade_id could break out of the
    attribute formgrader writes it into unescaped (``<input id="{{ grade_id }}">``)."""
    gid = meta.get("grade_id")
    if gid is not None and not (isinstance(gid, str) and GRADE_ID.fullmatch(gid)):
        return None
    return {k: v for k, v in meta.items() if isinstance(k, str) and isinstance(v, (str, int, float, bool))}


def _attachments(att) -> dict:
    out = {}
    if isinstance(att, dict):
        for name, bundle in att.items():
            if not isinstance(name, str) or not isinstance(bundle, dict):
                continue
            images = {m: b64 for m in RASTER if m in bundle for b64 in [raster_image(m, bundle[m])[0]] if b64}
            if images:
                out[name] = images
    return out


def _fence(text: str) -> str:
    """``text`` as a fenced code block whose fence is longer than any run of backticks inside it."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{LEARNER_TEXT_NOTE}\n\n{fence}text\n{text}\n{fence}"


def safe_cell(cell: dict, known_text: frozenset[str] | set[str] = frozenset()) -> dict | None:
    """A cell with nothing a front-end would run. ``known_text``: the chapter's own markdown and raw cell texts
    (normalised by :func:`_norm`), which stay as written; any other markdown or raw cell is the learner's and
    becomes a code block inside a markdown cell."""
    if not isinstance(cell, dict):
        return None
    kind = cell.get("cell_type")
    source = cell.get("source", "")
    source = "".join(source) if isinstance(source, list) else str(source)
    out = {"cell_type": kind, "metadata": cell_metadata(cell.get("metadata")), "source": source}
    if isinstance(cell.get("id"), str):
        out["id"] = cell["id"]
    if kind == "code":
        out["outputs"] = [s for s in map(safe_output, cell.get("outputs") or []) if s is not None]
        ec = cell.get("execution_count")
        out["execution_count"] = ec if isinstance(ec, int) and not isinstance(ec, bool) else None
        return out
    if kind not in ("markdown", "raw"):
        return None
    if _norm(source) not in known_text:
        out["cell_type"] = "markdown"
        out["source"] = _fence(plain_text(source))
        return out
    if kind == "markdown":
        att = _attachments(cell.get("attachments"))
        if att:
            out["attachments"] = att
    return out


def safe_notebook(nb: dict, known_text: frozenset[str] | set[str] = frozenset()) -> dict:
    """A copy of notebook JSON ``nb`` (as nbformat writes it) that renders nothing active; see the module text."""
    meta = nb.get("metadata") if isinstance(nb.get("metadata"), dict) else {}
    cells = nb.get("cells") if isinstance(nb.get("cells"), list) else []
    return {"nbformat": 4, "nbformat_minor": nb.get("nbformat_minor", 5) if isinstance(nb.get("nbformat_minor"), int)
            else 5,
            "metadata": {k: copy.deepcopy(meta[k]) for k in NOTEBOOK_METADATA if isinstance(meta.get(k), dict)},
            "cells": [s for s in (safe_cell(c, known_text) for c in cells) if s is not None]}


@functools.lru_cache(maxsize=64)
def _texts_of(path: str, mtime_ns: int, size: int) -> frozenset[str]:
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    return frozenset(_norm(c.get("source", "")) for c in nb.get("cells", [])
                     if isinstance(c, dict) and c.get("cell_type") in ("markdown", "raw"))


def chapter_texts(*notebooks: Path) -> frozenset[str]:
    """The markdown and raw cell texts of the chapter's own notebooks (source, release) that exist; cached per
    file version, since a batch writes one autograded notebook per learner."""
    texts: frozenset[str] = frozenset()
    for p in notebooks:
        try:
            st = os.stat(p)
        except OSError:
            continue
        texts |= _texts_of(str(p), st.st_mtime_ns, st.st_size)
    return texts
