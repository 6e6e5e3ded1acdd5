"""The translatable text of a release notebook, in units, and a catalogue applied back to it (issue 45).

A unit is what a translator translates in one go, keyed in the catalogue by its English text (its *msgid*):

- markdown: each paragraph (its lines joined by single spaces, so rewrapping the English changes no key), each
  heading, each list item, each table cell, each block quote, each admonition's paragraphs (MyST ```` ```{note} ````)
  and of a ``<details>`` hint its summary and each paragraph of its body. Inline math, code spans, links and HTML
  tags stay inside the unit: the translator moves them, never rewrites them (tests/test_translations.py checks).
  Fenced code, indented code, display math (``$$``) and the hint's ``<details>`` lines are skeleton, not units;
- code: of a cell that may change in the Chinese edition (a solution cell or an ungraded, unlocked cell: nbgrader
  checksums graded test cells and locked cells, so those stay byte-identical), each whole docstring (dedented,
  lines kept: its ``Args:`` layout is structure) and each comment: a run of consecutive full-line comments at one
  indentation is one unit (its lines joined by spaces), and a comment after code is a unit of its own.

A unit with nothing to translate (no letter outside math, code spans, tags and link targets) is not extracted,
nor is nbgrader's ``YOUR CODE HERE`` stub nor a tool directive (``noqa``...). Cells the caller names (the release's
kit cell and maintainers' note, which :mod:`autograder.kit` writes, not the chapter) are left out.

Parsing gives each cell as a list of segments, literal text and :class:`Unit` slots whose ``raw`` text, joined,
is the cell's source byte for byte; :func:`apply_catalogue` joins them with each translated slot rendered instead,
so everything outside a unit (code included) is unchanged. Unit boundaries are the translators' keys: change
this module's splitting rules and every changed key comes back fuzzy, so change them only deliberately.
"""
from __future__ import annotations

import ast
import copy
import io
import re
import tokenize
import unicodedata
from collections import Counter
from dataclasses import dataclass, field

import nbformat

from attention_course.cells import is_graded_test, nbgrader_meta

# nbgrader's code stub marker and tool directives: not prose, and tools or learners search for them verbatim.
UNTRANSLATED_COMMENTS = re.compile(r"(YOUR CODE HERE|noqa\b|type:\s|pragma\b|fmt:\s|pylint:|isort:)")
# MyST directives whose body is markdown prose (a ```` ```{note} ```` box); any other fence is verbatim.
PROSE_DIRECTIVES = {"note", "tip", "hint", "important", "warning", "caution", "attention", "danger", "error",
                    "seealso", "admonition"}
# What is not prose inside a unit: display or inline math, code spans, HTML tags, link targets.
NOT_PROSE = re.compile(r"\$\$.*?\$\$|\$[^$\n]*\$|(`+).*?\1|<[^>\n]*>|\]\([^)\n]*\)", re.S)
HINT_OPEN = re.compile(r"^(\s*<details>\s*<summary>)(.*?)(</summary>\s*)$")
HEADING = re.compile(r"^(\s{0,3}#{1,6}[ \t]+)(.*?)(\s*)$")
LIST_ITEM = re.compile(r"^(\s*)([-*+]|(\d{1,9})[.)])([ \t]+)(\S.*)$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(.*)$")
QUOTE = re.compile(r"^(\s*>[ \t]?)(.*)$")
TABLE_RULE = re.compile(r"^\s*\|?[\s:|-]+\|?\s*$")
# What a translation keeps verbatim, taken out in this order (math first: a "<" or "{" inside it is math).
PLACEHOLDERS = (
    ("math", re.compile(r"\$\$.*?\$\$|\$[^$\n]*\$", re.S)),
    ("code", re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.S)),
    ("link target", re.compile(r"(?<=\]\()[^)\s]*(?=\))")),
    ("html tag", re.compile(r"</?[A-Za-z][^<>\n]*>")),
    # {name}, {name.attr}, {name[key]}, {name!r}, {name:>8.3f}; not prose in braces ("{label: predictions}")
    ("format field", re.compile(r"\{[A-Za-z_]\w*(?:\.\w+|\[\w+\])*(?:![rsa])?(?::[^{}\s]*)?\}")),
)


@dataclass
class Unit:
    """One translatable stretch of a cell's source."""

    raw: str  # the English as it stands in the source
    msgid: str  # the catalogue's key: ``raw`` normalised (lines joined, docstring dedented)
    kind: str  # "paragraph", "heading", "list item", "table cell", "quote", "hint summary", "docstring", "comment"
    joiner: str = "\n"  # what a line break of the translation becomes in the source
    wrap: int = 0  # comments: the width (display columns) a translation is wrapped to, 0 = not wrapped

    def render(self, text: str) -> str:
        lines = text.split("\n")
        if self.wrap:
            lines = [piece for line in lines for piece in wrapped(line, self.wrap)]
        # A blank line gets no indentation (no trailing blanks in a docstring), but keeps a quote's ">".
        return lines[0] + "".join((self.joiner if line.strip() else self.joiner.rstrip(" \t")) + line
                                  for line in lines[1:])


Segment = str | Unit


@dataclass
class CellText:
    """A cell's source as segments, with where it is (for the translator's context)."""

    index: int
    cell_id: str
    cell_type: str
    role: str  # "markdown", "solution <grade_id>", "code"
    segments: list[Segment] = field(default_factory=list)

    def units(self) -> list[Unit]:
        return [s for s in self.segments if isinstance(s, Unit)]


def placeholders(text: str) -> Counter:
    """What a translation must keep as it is, as a multiset: display and inline math, code spans, HTML tags, link
    targets and Python format fields (``{name}``, outside math and code)."""
    found: Counter = Counter()
    rest = text
    for kind, pattern in PLACEHOLDERS:
        found.update((kind, m.group(0)) for m in pattern.finditer(rest))
        rest = pattern.sub(" ", rest)
    return found


def has_prose(text: str) -> bool:
    """Whether ``text`` holds a letter outside math, code spans, tags and link targets."""
    rest = NOT_PROSE.sub(" ", text)
    return any(unicodedata.category(ch).startswith("L") for ch in rest)


def display_width(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def wrapped(line: str, width: int) -> list[str]:
    """``line`` broken into lines of at most ``width`` display columns: at spaces, or between two wide
    (CJK) characters, which need no space between them."""
    pieces = re.findall(r"\s+|[^\s\u1100-\u115f\u2e80-\ua4cf\uac00-\ud7a3\uf900-\ufaff\ufe30-\ufe4f\uff00-\uff60"
                        r"\uffe0-\uffe6]+|\S", line)
    out, current = [], ""
    for piece in pieces:
        if current and not current.isspace() and display_width(current.rstrip() + piece) > width and piece.strip():
            out.append(current.rstrip())
            current = ""
        if not current and piece.isspace():
            continue
        current += piece
    if current.strip() or not out:
        out.append(current.rstrip())
    return out


# ---------------------------------------------------------------- markdown


def paragraph_unit(lines: list[str], prefix_re: re.Pattern | None, kind: str, joiner: str) -> Unit:
    """A unit over ``lines`` (the first without its marker); continuation lines' prefixes (indentation, ``> ``)
    stay in ``raw`` but not in the key."""
    texts = [lines[0].strip()] + [(prefix_re.sub("", line) if prefix_re else line).strip() for line in lines[1:]]
    return Unit("\n".join(lines), " ".join(t for t in texts if t), kind, joiner)


def starts_block(line: str, in_paragraph: bool) -> bool:
    """Whether ``line`` ends the paragraph before it (CommonMark: only a list numbered 1 interrupts one)."""
    s = line.strip()
    if not s:
        return True
    item = LIST_ITEM.match(line)
    if item and (item.group(3) is None or not in_paragraph or item.group(3) == "1"):
        return True
    return bool(HEADING.match(line) or FENCE.match(line) or s.startswith("$$") or s.startswith("|")
                or s.startswith(">") or s.startswith("<details") or s.startswith("</details")
                or HINT_OPEN.match(line))


def split_table_row(line: str) -> list[Segment]:
    """A table row as literal pipes and one unit per cell (a ``|`` inside math or a code span is cell text)."""
    segments: list[Segment] = []
    cell, i, protected = "", 0, NOT_PROSE
    while i < len(line):
        ch = line[i]
        if ch in "$`":
            match = protected.match(line, i)
            if match:
                cell += match.group(0)
                i = match.end()
                continue
        if ch == "|" and (i == 0 or line[i - 1] != "\\"):
            segments += table_cell(cell)
            segments.append("|")
            cell = ""
        else:
            cell += ch
        i += 1
    segments += table_cell(cell)
    return segments


def table_cell(cell: str) -> list[Segment]:
    return inline_unit(cell, "table cell")


def markdown_segments(lines: list[str]) -> list[Segment]:
    """``lines`` (a cell's source split at newlines) as segments; joined, they are ``"\\n".join(lines)``."""
    out: list[Segment] = []
    i, n, last_block = 0, len(lines), ""
    while i < n:
        line = lines[i]
        s = line.strip()
        block = "other"
        if not s:
            out.append(line)
            i += 1
            block = last_block  # a blank line does not end a list's reach over an indented paragraph
        elif (fence := FENCE.match(line)):
            mark = fence.group(2)
            j = i + 1
            while j < n and not (lines[j].strip().startswith(mark) and set(lines[j].strip()) == {mark[0]}):
                j += 1
            directive = re.fullmatch(r"\{([\w-]+)\}.*", fence.group(3))
            if directive and directive.group(1) in PROSE_DIRECTIVES and j < n:
                out += [line, "\n", *markdown_segments(lines[i + 1:j]), "\n", lines[j]]
            else:
                out.append("\n".join(lines[i:j + 1]))
            i = min(j + 1, n)
        elif s.startswith("$$"):
            j = i
            if s == "$$" or not s.endswith("$$") or len(s) < 4:
                j = i + 1
                while j < n and not lines[j].strip().endswith("$$"):
                    j += 1
            out.append("\n".join(lines[i:j + 1]))
            i = min(j + 1, n)
        elif line.startswith("    ") and last_block != "list" and (i == 0 or not lines[i - 1].strip()):
            j = i
            while j < n and (lines[j].startswith("    ") or not lines[j].strip()):
                j += 1
            while j > i + 1 and not lines[j - 1].strip():
                j -= 1  # trailing blank lines belong to what follows
            out.append("\n".join(lines[i:j]))
            i = j
        elif (hint := HINT_OPEN.match(line)):
            out.append(hint.group(1))
            out += inline_unit(hint.group(2), "hint summary")
            out.append(hint.group(3))
            i += 1
        elif s.startswith("<details") or s.startswith("</details"):
            out.append(line)
            i += 1
        elif (heading := HEADING.match(line)):
            out += [heading.group(1), Unit(heading.group(2), heading.group(2), "heading", " ")]
            if heading.group(3):
                out.append(heading.group(3))
            i += 1
        elif s.startswith("|"):
            j = i
            while j < n and lines[j].strip().startswith("|"):
                if j > i:
                    out.append("\n")
                if TABLE_RULE.match(lines[j]):
                    out.append(lines[j])
                else:
                    out += split_table_row(lines[j])
                j += 1
            i = j
        elif (quote := QUOTE.match(line)):
            j = i + 1
            while j < n and lines[j].strip().startswith(">"):
                j += 1
            prefix = quote.group(1)
            out += [prefix, paragraph_unit([quote.group(2)] + lines[i + 1:j], re.compile(r"^\s*>[ \t]?"), "quote",
                                           "\n" + prefix)]
            i = j
        elif (item := LIST_ITEM.match(line)):
            j = i + 1
            while j < n and not starts_block(lines[j], in_paragraph=False):
                j += 1
            marker = item.group(1) + item.group(2) + item.group(4)
            out += [marker, paragraph_unit([item.group(5)] + lines[i + 1:j], None, "list item",
                                           "\n" + " " * len(marker))]
            i = j
            block = "list"
        else:
            j = i + 1
            while j < n and not starts_block(lines[j], in_paragraph=True):
                j += 1
            lead = line[: len(line) - len(line.lstrip())]
            if lead:
                out.append(lead)
            out.append(paragraph_unit([line.lstrip()] + lines[i + 1:j], None, "paragraph", "\n" + lead))
            i = j
            block = "list" if lead and last_block == "list" else "other"
        last_block = block
        if i < n:
            out.append("\n")
    return out


def inline_unit(text: str, kind: str) -> list[Segment]:
    """``text`` as a one-line unit with its surrounding blanks kept outside it."""
    core = text.strip()
    if not core:
        return [text] if text else []
    lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()):]
    return [x for x in (lead, Unit(core, core, kind, " "), trail) if x]


# ---------------------------------------------------------------- code


def line_offsets(source: str) -> list[int]:
    """The offset in ``source`` at which each line (1-based, as ast and tokenize count) starts."""
    offsets, total = [0, 0], 0
    for line in source.splitlines(keepends=True):
        total += len(line)
        offsets.append(total)
    return offsets


def docstring_units(source: str, offsets: list[int]) -> list[tuple[int, int, Unit]]:
    """(start, end, unit) of each docstring's body (between its quotes) of the module, functions and classes."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or not node.body:
            continue
        first = node.body[0]
        if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            continue
        start = offsets[first.value.lineno] + len(
            source[offsets[first.value.lineno]:].encode()[:first.value.col_offset].decode())
        end = offsets[first.value.end_lineno] + len(
            source[offsets[first.value.end_lineno]:].encode()[:first.value.end_col_offset].decode())
        literal = source[start:end]
        opening = re.match(r"[rRuUbB]*(\"\"\"|'''|\"|')", literal)
        if not opening or not literal.endswith(opening.group(1)):
            continue  # an implicitly concatenated string: not a docstring a translator should see
        quote = opening.group(1)
        body_start, body_end = start + opening.end(), end - len(quote)
        body = source[body_start:body_end]
        core = body.strip()
        if not has_prose(core):
            continue
        lead = body[: len(body) - len(body.lstrip())]
        core_start = body_start + len(lead)
        core_end = core_start + len(core)
        lines = core.split("\n")
        rest = [line for line in lines[1:] if line.strip()]
        indent = min((len(line) - len(line.lstrip()) for line in rest), default=0)
        key = "\n".join([lines[0]] + [line[indent:] if line.strip() else "" for line in lines[1:]])
        found.append((core_start, core_end, Unit(core, key.strip(), "docstring", "\n" + " " * indent)))
    return found


def comment_text(token: str) -> str:
    return token.lstrip("#").strip()


def is_shape(text: str) -> bool:
    """Whether a comment only gives a shape or a tuple of names, ``(B, H, T - 1, d_h)``: nothing to translate
    (``(m=5 lines, d=3 features)`` has words, and is translated)."""
    inner = re.fullmatch(r"\((.*)\)", text.strip())
    return bool(inner) and all(sum(1 for token in element.split() if re.search(r"[^\W\d_]", token)) <= 1
                               for element in inner.group(1).split(","))


def comment_units(source: str, offsets: list[int]) -> list[tuple[int, int, Unit]]:
    """(start, end, unit) of each comment run (consecutive full-line comments at one column) and each comment
    after code. A unit starts after its first line's ``# `` (kept as it is) and ends where its last line ends."""
    comments = []  # (row, col, token, full line?, translatable?, the line)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            (row, col), line = tok.start, tok.line
            text = comment_text(tok.string)
            usable = has_prose(text) and not is_shape(text) and not UNTRANSLATED_COMMENTS.search(tok.string)
            comments.append((row, col, tok.string, not line[:col].strip(), usable, line))
    found, k = [], 0
    while k < len(comments):
        row, col, token, full_line, usable, _ = comments[k]
        run = [comments[k]]
        while (full_line and usable and k + len(run) < len(comments)
               and (nxt := comments[k + len(run)])[3] and nxt[4] and nxt[0] == run[-1][0] + 1 and nxt[1] == col):
            run.append(nxt)
        k += len(run)
        if not usable:
            continue
        opening = re.match(r"#+[ \t]*", token).group(0)
        start = offsets[row] + col + len(opening)
        end = offsets[run[-1][0]] + run[-1][1] + len(run[-1][2])
        key = " ".join(comment_text(c[2]) for c in run)
        if full_line:  # a translation is rewrapped to the run's width (at least PEP 8's 79 columns)
            width = max(79, *(display_width(c[5].rstrip("\n")) for c in run)) - col - len(opening)
            unit = Unit(source[start:end], key, "comment", "\n" + source[offsets[row]:offsets[row] + col] + opening,
                        wrap=width)
        else:
            unit = Unit(source[start:end], key, "comment", " ")
        found.append((start, end, unit))
    return found


def code_segments(source: str) -> list[Segment]:
    offsets = line_offsets(source)
    slots = sorted(docstring_units(source, offsets) + comment_units(source, offsets), key=lambda x: x[0])
    out: list[Segment] = []
    pos = 0
    for start, end, unit in slots:
        out += [source[pos:start], unit]
        pos = end
    out.append(source[pos:])
    return [s for s in out if s != ""]


# ---------------------------------------------------------------- cells and notebooks


def translatable_code(cell) -> bool:
    """A code cell whose docstrings and comments the Chinese edition may change: nbgrader checksums graded test
    cells and locked cells (``nbgrader validate`` and autograde compare them), so those stay as in English."""
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and not is_graded_test(cell) and not meta.get("locked")


def cell_text(index: int, cell) -> CellText | None:
    """The segments of one release cell, or None for a cell that is not translated (a locked or graded one)."""
    if cell.cell_type == "markdown":
        return CellText(index, cell.get("id", ""), "markdown", "markdown", markdown_segments(cell.source.split("\n")))
    if translatable_code(cell):
        gid = nbgrader_meta(cell).get("grade_id")
        role = f"solution {gid}" if nbgrader_meta(cell).get("solution") else "code"
        return CellText(index, cell.get("id", ""), "code", role, code_segments(cell.source))
    return None


def notebook_text(nb, skip: frozenset[str] = frozenset()) -> list[CellText]:
    """The translatable cells of ``nb``, but those whose id is in ``skip``."""
    return [text for i, cell in enumerate(nb.cells)
            if cell.get("id") not in skip and (text := cell_text(i, cell)) is not None]


@dataclass(frozen=True)
class Entry:
    """A catalogue entry as extraction sees it: the key and where it occurs."""

    msgid: str
    cell: int
    context: str  # the extracted comment: "cell 6 (solution masked_softmax, masked-softmax): docstring"


def entries(nb, skip: frozenset[str] = frozenset()) -> list[Entry]:
    """Every unit of ``nb`` with prose, in notebook order (a key may occur more than once)."""
    found = []
    for text in notebook_text(nb, skip):
        for unit in text.units():
            if unit.msgid and has_prose(unit.msgid):
                found.append(Entry(unit.msgid, text.index,
                                   f"cell {text.index} ({text.role}, id {text.cell_id}): {unit.kind}"))
    return found


def source_of(text: CellText, translate) -> str:
    """The cell's source with each unit that ``translate(msgid)`` answers (a non-empty string) replaced."""
    parts = []
    for seg in text.segments:
        if isinstance(seg, str):
            parts.append(seg)
            continue
        translation = translate(seg.msgid) if seg.msgid and has_prose(seg.msgid) else None
        parts.append(seg.render(translation) if translation else seg.raw)
    return "".join(parts)


def recording(translate, missing: list[str]):
    """``translate`` that also appends each key it cannot answer to ``missing``."""
    def lookup(msgid: str) -> str | None:
        found = translate(msgid)
        if not found:
            missing.append(msgid)
        return found
    return lookup


def apply_catalogue(nb, translate, skip: frozenset[str] = frozenset()) -> tuple[nbformat.NotebookNode, list[str]]:
    """A copy of ``nb`` with every unit that ``translate(msgid) -> str | None`` answers translated, and the keys
    it did not answer, in order (those units stay English). Cells whose id is in ``skip`` are copied as they are."""
    out = copy.deepcopy(nb)
    missing: list[str] = []
    for text in notebook_text(nb, skip):
        out.cells[text.index].source = source_of(text, recording(translate, missing))
    return out, missing


def markdown_units(text: str) -> list[Unit]:
    """The units with prose of a Markdown text that is not a notebook (the kit's README, its install text)."""
    return [u for u in CellText(0, "", "markdown", "markdown", markdown_segments(text.split("\n"))).units()
            if u.msgid and has_prose(u.msgid)]


def translate_markdown(text: str, translate) -> tuple[str, list[str]]:
    """A Markdown text with every unit ``translate`` answers translated, and the keys it did not answer."""
    missing: list[str] = []
    cell = CellText(0, "", "markdown", "markdown", markdown_segments(text.split("\n")))
    return source_of(cell, recording(translate, missing)), missing
