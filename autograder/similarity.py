"""Submissions that look copied: ``python -m autograder similarity [CHAPTER ...]``.

What a pair of learners shares is measured on their solution cells only, the way MOSS measures it
(Schleimer, Wilkerson and Aiken, "Winnowing: local algorithms for document fingerprinting", SIGMOD 2003):

1. **Normalise** (:func:`normalise`). Each solution cell (the cells the release marks as solutions, matched
   by ``grade_id``, in the release's order) is tokenised with Python's own tokenizer. Comments, docstrings,
   blank lines and indentation are dropped; every identifier becomes ``V`` and every literal ``L``, except
   the names after a dot and keyword-argument names (``x.amax(dim=...)``): renaming one's variables
   changes nothing, while the library calls a learner chose still tell two independent solutions apart.
   A cell Python cannot tokenise falls back to a regular-expression tokenizer, so nothing a learner writes
   stops the check.
2. **Fingerprint** (:func:`fingerprints`): a hash of every run of ``K`` consecutive tokens, and of those
   the smallest in every window of ``W`` consecutive hashes (winnowing). Any run of at least ``W + K - 1``
   shared tokens is guaranteed to be caught; reordering functions or inserting no-op lines breaks only the
   few k-grams that straddle the seam.
3. **Remove what everyone has.** Fingerprints of the release's starter code (signatures, docstrings,
   ``raise NotImplementedError()``) are removed first, then those of the published reference solution (a
   submission that matches the reference is reported as such, on its own line, instead of pairing every
   learner who copied it), then those that more than :data:`COMMON` of the class share (idioms, not
   copying).
4. **Compare through an index.** ``fingerprint -> learners that have it``; a pair is counted only when it
   shares a fingerprint, so the work is ``O(F + sum over fingerprints of c^2)`` for ``F`` fingerprints in all
   and ``c <= COMMON`` owners each, instead of comparing all ``N^2 / 2`` pairs. A pair's score is its shared
   fingerprints over the smaller side's (how much of the shorter submission is in the other).

Pairs scoring at least :data:`THRESHOLD` are reported with the lines their shared fingerprints cover, side
by side (as escaped text: nothing a learner wrote is rendered as markup). ``tests/test_similarity.py``
justifies the threshold: copies disguised by renaming, reordering, comments and no-op lines score far above
it, and independently written correct solutions far below it; both extremes are printed by the test.
"""
from __future__ import annotations

import argparse
import ast
import html
import io
import keyword
import re
import sys
import tokenize
import zlib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from attention_course.cells import grade_id, is_solution

K = 12  # tokens per k-gram: about one short statement once names are abstracted
W = 6  # winnowing window: any shared run of W + K - 1 = 17 tokens is found
THRESHOLD = 0.5  # share of the smaller submission's fingerprints (tests/test_similarity.py measures the margin)
MIN_FINGERPRINTS = 8  # a submission with fewer (mostly blank) is not paired: too little to judge
COMMON_SHARE = 0.2  # fingerprints owned by more than this share of the class are idioms...
COMMON_MIN = 8  # ...but never fewer than this many owners (a small class has no idioms to learn)
CSV_NAME = "similarity.csv"

_DROP = {tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING,
         tokenize.ENDMARKER, tokenize.TYPE_COMMENT if hasattr(tokenize, "TYPE_COMMENT") else -1}
_FALLBACK = re.compile(r"""#[^\n]*|(?P<s>[rbfuRBFU]{0,2}('''|\"\"\"|'|")(?:\\.|(?!\2).)*?\2)|(?P<n>\d[\w.]*)"""
                       r"""|(?P<w>[A-Za-z_]\w*)|(?P<nl>\n)|(?P<o>\S)""", re.S)


@dataclass
class Token:
    text: str  # the normalised token ("V", "L", a keyword, an operator, an attribute name)
    cell: int  # index of the solution cell it came from
    line: int  # 1-based line within that cell


def _classify(kind: int, text: str, prev: str, nxt: str) -> str | None:
    if kind == tokenize.NAME:
        if keyword.iskeyword(text) or keyword.issoftkeyword(text) and text in ("match", "case"):
            return text
        if prev == "." or nxt == "=":  # an attribute, or a keyword argument's name: the API, not a choice of name
            return text
        return "V"
    if kind in (tokenize.NUMBER, tokenize.STRING) or kind >= getattr(tokenize, "FSTRING_START", 10 ** 6):
        return "L"
    if kind == tokenize.NEWLINE:
        return ";"
    return text


def _noop_lines(source: str) -> set[int]:
    """Lines of statements that do nothing: ``pass``, a bare constant, ``name = constant`` for a name the cell
    never reads, ``x = x``. A copier inserts such lines to break up shared runs of tokens."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()
    nodes = list(ast.walk(tree))
    loaded = {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    lines: set[int] = set()
    for node in nodes:
        noop = isinstance(node, ast.Pass) or (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))
        if isinstance(node, ast.Assign) and all(isinstance(t, ast.Name) for t in node.targets):
            names = {t.id for t in node.targets}
            noop = (isinstance(node.value, ast.Constant) and not names & loaded) or (
                isinstance(node.value, ast.Name) and names == {node.value.id})
        if noop:
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def _python_tokens(source: str) -> list[tuple[int, str, int]]:
    """(kind, text, line) of every token, docstrings, comments and no-op statements dropped; raises on what
    is not Python."""
    skip = _noop_lines(source)
    raw = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
           if t.type not in _DROP and not (t.start[0] in skip and t.type != tokenize.NEWLINE)]
    # A dropped statement leaves its NEWLINE behind: keep one NEWLINE in a row.
    raw = [t for i, t in enumerate(raw) if not (t.type == tokenize.NEWLINE and i and raw[i - 1].type == tokenize.NEWLINE)]
    out, i = [], 0
    while i < len(raw):
        t = raw[i]
        # A docstring (or any bare string statement): a string that starts a statement and ends it.
        starts = i == 0 or raw[i - 1].type == tokenize.NEWLINE
        if t.type == tokenize.STRING and starts and (i + 1 == len(raw) or raw[i + 1].type == tokenize.NEWLINE):
            i += 2
            continue
        out.append((t.type, t.string, t.start[0]))
        i += 1
    return out


def _fallback_tokens(source: str) -> list[tuple[int, str, int]]:
    out, line = [], 1
    for m in _FALLBACK.finditer(source):
        text = m.group(0)
        if m.group("nl"):
            out.append((tokenize.NEWLINE, "\n", line))
        elif m.group("s"):
            out.append((tokenize.STRING, text, line))
        elif m.group("n"):
            out.append((tokenize.NUMBER, text, line))
        elif m.group("w"):
            out.append((tokenize.NAME, text, line))
        elif m.group("o"):
            out.append((tokenize.OP, text, line))
        line += text.count("\n")
    return out


def normalise(cells: list[str]) -> list[Token]:
    """The normalised token stream of a submission's solution cells (see the module docstring)."""
    tokens: list[Token] = []
    for index, source in enumerate(cells):
        try:
            raw = _python_tokens(source)
        except (tokenize.TokenError, IndentationError, SyntaxError):
            raw = _fallback_tokens(source)
        header = depth = 0  # header: inside a def's parameter list, where parameter names are plain names
        for j, (kind, text, line) in enumerate(raw):
            prev = raw[j - 1][1] if j else ""
            nxt = raw[j + 1][1] if j + 1 < len(raw) else ""
            if text == "def" and kind == tokenize.NAME:
                header = 1
            elif kind == tokenize.OP and text in "([{":
                depth += 1
            elif kind == tokenize.OP and text in ")]}":
                depth = max(0, depth - 1)
            elif header and text == ":" and depth == 0:
                header = 0
            # `name=` is a keyword argument only inside a call's brackets; at depth 0 it is an assignment.
            keyword_arg = nxt == "=" and depth > 0 and not header
            norm = _classify(kind, text, prev, "=" if keyword_arg else "")
            if norm is not None:
                tokens.append(Token(norm, index, line))
    return tokens


def fingerprints(tokens: list[Token], k: int | None = None, w: int | None = None) -> dict[int, list[int]]:
    """Winnowed k-gram hashes: ``{hash: [start index of each k-gram with it, ...]}``.

    crc32 rather than ``hash()``: the same submission gets the same fingerprints in every process.
    """
    k, w = k or K, w or W
    texts = [t.text for t in tokens]
    grams = [zlib.crc32("\x1f".join(texts[i:i + k]).encode()) for i in range(len(texts) - k + 1)]
    chosen: dict[int, list[int]] = defaultdict(list)
    if not grams:
        return chosen
    last = -1
    for start in range(max(1, len(grams) - w + 1)):
        window = grams[start:start + w]
        low = min(window)
        pos = start + max(i for i, h in enumerate(window) if h == low)  # rightmost minimum (the paper's rule)
        if pos != last:
            chosen[grams[pos]].append(pos)
            last = pos
    return chosen


@dataclass
class Submission:
    student: str
    cells: list[str]  # solution cells' sources, in the release's order
    tokens: list[Token] = field(default_factory=list)
    prints: dict[int, list[int]] = field(default_factory=dict)

    def fingerprint(self) -> "Submission":
        self.tokens = normalise(self.cells)
        self.prints = fingerprints(self.tokens)
        return self

    def lines(self, hashes) -> set[tuple[int, int]]:
        """(cell, line) of every line a k-gram with one of ``hashes`` covers."""
        covered = set()
        for h in hashes:
            for start in self.prints.get(h, ()):
                for t in self.tokens[start:start + K]:  # a k-gram covers K tokens
                    covered.add((t.cell, t.line))
        return covered


@dataclass
class Pair:
    a: Submission
    b: Submission  # for a reference match: the reference
    shared: set[int]
    score: float
    kind: str = "pair"  # or "reference"

    def row(self, chapter: str) -> dict:
        return {"chapter": chapter, "kind": self.kind, "student_a": self.a.student, "student_b": self.b.student,
                "score": f"{self.score:.2f}", "shared": len(self.shared), "fingerprints_a": len(self.a.prints),
                "fingerprints_b": len(self.b.prints)}


def solution_ids(release_nb) -> list[str]:
    """grade_ids of the release's solution cells, in order (the cells a learner writes)."""
    return [grade_id(c) for c in release_nb.cells if is_solution(c) and grade_id(c)]


def solution_cells(nb, ids: list[str]) -> list[str]:
    """A notebook's sources for the cells ``ids`` (matched by grade_id; a missing one is empty)."""
    by_id = {}
    for c in nb.cells:
        gid = grade_id(c) if c.get("cell_type") == "code" else None
        if isinstance(gid, str) and gid in ids and gid not in by_id:
            by_id[gid] = c.get("source", "") if isinstance(c.get("source", ""), str) else ""
    return [by_id.get(i, "") for i in ids]


def _score(shared: int, a: Submission, b: Submission) -> float:
    return shared / max(1, min(len(a.prints), len(b.prints)))


def compare(subs: list[Submission], starter: Submission, reference: Submission | None = None,
            threshold: float = THRESHOLD) -> tuple[list[Pair], list[Pair]]:
    """(pairs at or above ``threshold``, reference matches at or above it), each sorted by score, highest first.

    Every submission's fingerprints lose the starter's, then (for the pairs) the reference's and the class's
    common ones. Fingerprints are computed here if a submission has none yet.
    """
    for s in (*subs, starter, *([reference] if reference else [])):
        if not s.tokens and any(s.cells):
            s.fingerprint()
    for s in subs:
        for h in starter.prints:
            s.prints.pop(h, None)
    matches = []
    if reference is not None:
        for h in starter.prints:
            reference.prints.pop(h, None)
        ref = set(reference.prints)
        for s in subs:
            if len(s.prints) >= MIN_FINGERPRINTS:
                shared = ref & s.prints.keys()
                score = _score(len(shared), s, reference)
                if score >= threshold:
                    matches.append(Pair(s, reference, shared, score, "reference"))
        for s in subs:
            for h in ref:
                s.prints.pop(h, None)
    index: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(subs):
        if len(s.prints) >= MIN_FINGERPRINTS:
            for h in s.prints:
                index[h].append(i)
    common = max(COMMON_MIN, int(COMMON_SHARE * len(subs)))
    counts: dict[tuple[int, int], set[int]] = defaultdict(set)
    for h, owners in index.items():
        if 2 <= len(owners) <= common:
            for x in range(len(owners)):
                for y in range(x + 1, len(owners)):
                    counts[owners[x], owners[y]].add(h)
    pairs = []
    for (i, j), shared in counts.items():
        score = _score(len(shared), subs[i], subs[j])
        if score >= threshold:
            pairs.append(Pair(subs[i], subs[j], shared, score))
    key = lambda p: (-p.score, p.a.student, p.b.student)
    return sorted(pairs, key=key), sorted(matches, key=key)


# ----------------------------------------------------------------------------------------------------
# Presentation: escaped text only
# ----------------------------------------------------------------------------------------------------
def _side(sub: Submission, covered: set[tuple[int, int]], ids: list[str]) -> str:
    rows = []
    for index, source in enumerate(sub.cells):
        if not source.strip():
            continue
        rows.append(f'<div class="cell">{html.escape(ids[index] if index < len(ids) else "")}</div>')
        for n, text in enumerate(source.splitlines(), start=1):
            line = html.escape(text) or " "
            rows.append(f"<mark>{line}</mark>" if (index, n) in covered else f"<span>{line}</span>")
    return "<pre>" + "\n".join(rows) + "</pre>"


def side_by_side(pair: Pair, ids: list[str]) -> str:
    """Both submissions' solution cells, the lines their shared fingerprints cover marked, as escaped HTML."""
    return ('<div class="sbs"><div><h4>' + html.escape(pair.a.student) + "</h4>"
            + _side(pair.a, pair.a.lines(pair.shared), ids) + "</div><div><h4>" + html.escape(pair.b.student)
            + "</h4>" + _side(pair.b, pair.b.lines(pair.shared), ids) + "</div></div>")


STYLE = (".sbs{display:grid;grid-template-columns:1fr 1fr;gap:1em}.sbs pre{font-size:12px;white-space:pre-wrap;"
         "border:1px solid #ccc;padding:.5em}.sbs mark{background:#ffe08a}.sbs .cell{color:#666;font-style:italic}")


@dataclass
class ChapterResult:
    chapter: str
    ids: list[str]
    learners: int
    pairs: list[Pair]
    reference: list[Pair]

    def rows(self) -> list[dict]:
        return [p.row(self.chapter) for p in (*self.reference, *self.pairs)]

    def html(self) -> str:
        """The class report's section for this chapter (escaped text; no script)."""
        out = [f"<h3>{html.escape(self.chapter)}: {len(self.pairs)} similar pair(s) among {self.learners} "
               f"learners (threshold {THRESHOLD:.2f})</h3>"]
        if self.reference:
            out.append("<p>Matching the published reference solution: " + ", ".join(
                f"{html.escape(p.a.student)} ({p.score:.0%})" for p in self.reference) + "</p>")
        for p in self.pairs:
            out.append(f"<details><summary>{html.escape(p.a.student)} and {html.escape(p.b.student)}: "
                       f"{p.score:.0%} of the shorter submission shared ({len(p.shared)} fingerprints)</summary>"
                       + side_by_side(p, self.ids) + "</details>")
        return "\n".join(out)


def check_chapter(chapter: str, notebooks: list[tuple[str, object]], release_nb, reference_nb=None,
                  threshold: float = THRESHOLD) -> ChapterResult:
    """Similar pairs among ``notebooks`` (``[(student, notebook), ...]``) of one chapter."""
    ids = solution_ids(release_nb)
    subs = [Submission(student, solution_cells(nb, ids)) for student, nb in notebooks]
    starter = Submission("(release)", solution_cells(release_nb, ids))
    reference = Submission("(reference solution)", solution_cells(reference_nb, ids)) if reference_nb else None
    pairs, matches = compare(subs, starter, reference, threshold)
    return ChapterResult(chapter, ids, len(subs), pairs, matches)


def write_csv(path: Path, results: list[ChapterResult]) -> Path:
    """``grading/similarity.csv``: one row per reference match and per similar pair (ids are learner text:
    written through the grader's formula-safe CSV writer)."""
    from .export import safe_writer

    path.parent.mkdir(parents=True, exist_ok=True)
    fields = ["chapter", "kind", "student_a", "student_b", "score", "shared", "fingerprints_a", "fingerprints_b"]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = safe_writer(f)
        writer.writerow(fields)
        for r in results:
            for row in r.rows():
                writer.writerow([row[k] for k in fields])
    tmp.replace(path)
    return path


def run(course, chapters: list[str] | None = None, submitted: Path | None = None,
        threshold: float = THRESHOLD) -> list[ChapterResult]:
    """Check every chapter's submissions under nbgrader's ``submitted/`` layout; write ``similarity.csv``."""
    import nbformat

    from .batch import discover
    from .intake import Unusable, read_submission

    chapters = chapters or course.chapters()
    submitted = Path(submitted) if submitted else course.grading / "submitted"
    by_chapter: dict[str, list] = defaultdict(list)
    for task in discover(submitted, chapters):
        if task.refusal:
            continue  # not a regular notebook file: grading scores it zero with the reason
        try:
            nb, _ = read_submission(Path(task.path), task.chapter)
        except Unusable:
            continue  # grading reports it; there is nothing to compare
        by_chapter[task.chapter].append((task.student, nb))
    results = []
    for chapter in chapters:
        if not by_chapter.get(chapter) or not course.release_notebook(chapter).is_file():
            continue
        release = nbformat.read(course.release_notebook(chapter), as_version=4)
        reference = nbformat.read(course.source_notebook(chapter), as_version=4)
        results.append(check_chapter(chapter, by_chapter[chapter], release, reference, threshold))
    write_csv(course.grading / CSV_NAME, results)
    return results


def main(argv: list[str] | None = None) -> int:
    from .course import Course

    parser = argparse.ArgumentParser(prog="python -m autograder similarity", description=__doc__.split("\n")[0])
    parser.add_argument("chapters", nargs="*")
    parser.add_argument("--course", type=Path, default=None, help="course root (default: this repository)")
    parser.add_argument("--submitted", type=Path, default=None, help="default: grading/submitted")
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    args = parser.parse_args(argv)
    course = Course(args.course) if args.course else Course()
    results = run(course, args.chapters or None, args.submitted, args.threshold)
    for r in results:
        print(f"{r.chapter}: {r.learners} learners, {len(r.pairs)} similar pair(s), "
              f"{len(r.reference)} matching the reference")
        for p in (*r.reference, *r.pairs):
            print(f"  {p.score:4.0%}  {p.a.student!a} ~ {p.b.student!a}")
    print(f"wrote {course.grading / CSV_NAME}")
    return 0
