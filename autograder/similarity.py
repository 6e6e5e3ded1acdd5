"""Submissions that look copied: ``python -m autograder similarity [CHAPTER ...]``.

What a pair of learners shares is measured on all the code the grader runs from each learner, the way MOSS
measures it (Schleimer, Wilkerson and Aiken, "Winnowing: local algorithms for document fingerprinting",
SIGMOD 2003):

0. **Read the learner's code** (:func:`learner_code`): every code cell of the notebook that grading runs as
   the learner's, decided by the grader's own :func:`autograder.structure.repair`: the solution cells and the
   learner's own added cells, in the order they run; never the test and read-only cells, which grading
   restores from the course. All of it is read (the intake bounds it: 1 MiB a cell, 4 MiB a notebook), and at
   most :data:`TOKEN_CAP` normalised tokens of it are fingerprinted: comments, blank lines, docstrings and
   dropped no-ops count none, so padding cannot push copied code past the cap. A submission with more is cut
   there and listed ("cut") in ``similarity.csv`` and the class report.
1. **Normalise** (:func:`normalise`): one pass of one scanner over each cell (:data:`TOKEN`: a regular
   expression whose every branch either has a bounded length or is a possessive loop that consumes each
   character it looks at once; an unterminated string ends at the end of its line, or of the cell for a
   triple quote), so the work is linear in the text whatever the text is: no Python tokenizer, no fallback,
   no backtracking. Comments, docstrings, blank lines and indentation are dropped, and so are statements
   that do nothing (``pass``, a bare constant, ``name = constant`` for a name the cell never reads,
   ``x = x``, a call whose arguments are all literals or names such as ``id(0)``): a copier inserts those to
   break up shared runs. A string literal of :data:`CODE_STRING` characters or more is also scanned as code,
   its tokens in place after its ``L`` (one level deep: the text of a string is scanned once more at most), so
   ``exec("<copied code>")``, ``eval``, ``compile`` or any decoding that keeps the source text in a literal is
   read as code. Every identifier becomes ``V`` and every
   literal ``L``, except keywords, the names after a dot and keyword-argument names (``x.amax(dim=...)``):
   renaming one's variables changes nothing, while the library calls a learner chose still tell two
   independent solutions apart. Tokens are kept as arrays of 32-bit hashes and line numbers (:class:`Tokens`),
   8 bytes a token.
2. **Fingerprint** (:func:`fingerprints`): a hash of every run of ``K`` consecutive tokens, and of those
   the smallest in every window of ``W`` consecutive hashes (winnowing). Any run of at least ``W + K - 1``
   shared tokens is guaranteed to be caught; reordering functions or inserting no-op lines breaks only the
   few k-grams that straddle the seam.
3. **Remove what everyone has.** Fingerprints of the release's starter code (signatures, docstrings,
   ``raise NotImplementedError()``, the chapter's demo cells) are removed first, then those of the published
   reference solution (a submission that matches the reference is reported as such, on its own line, instead
   of pairing every learner who copied it), then those that more than :data:`COMMON_SHARE` of the class
   share (idioms, not copying). Idioms must not hide copying: a ring of identical copies holds every one of its
   fingerprints more often than that. So before they are set aside, the common fingerprints are grouped by the
   exact set of learners holding them (a hash of that set: linear). Learners write idioms among code they each
   chose, so each idiom is held by another set of learners; a ring holds all its copied code as one set. A set
   that holds at least :data:`MIN_FINGERPRINTS` fingerprints and :data:`THRESHOLD` of its smallest member's is a
   :class:`Group` ("group" in ``similarity.csv``, a section of the report). A member who changed a few lines
   still shares the rest with the ring, so near copies are grouped too. Matching k-grams is evidence, not
   proof, and a determined rewriter can evade it (calls that do work between statements, say).
4. **Compare through an index.** ``fingerprint -> learners that have it``; a pair is counted only when it
   shares a fingerprint, so the work is ``O(F + sum over fingerprints of c^2)`` for ``F`` fingerprints in all
   and ``c <= COMMON`` owners each, instead of comparing all ``N^2 / 2`` pairs. A pair's score is its shared
   fingerprints over the smaller side's (how much of the shorter submission is in the other).

Pairs scoring at least :data:`THRESHOLD` are reported with the lines their shared fingerprints cover, side
by side (as escaped text: nothing a learner wrote is rendered as markup). ``tests/test_similarity.py``
justifies the threshold: copies disguised by renaming, reordering, comments and no-op lines score far above
it, and independently written correct solutions far below it; both extremes are printed by the test.

Every learner file is hostile input on the trusted side, so :func:`run` (``grade`` and this command) does the
work above in a child process with CPU, memory and wall-clock budgets (autograder/similarity_stage.py): a
check that does not finish is one line in the report, in ``similarity.csv`` and on the command's output,
never a stalled ``grade``. ``python -m autograder.similarity REQUEST`` is that child's entry point.
"""
from __future__ import annotations

import argparse
import html
import keyword
import re
import sys
import zlib
from array import array
from bisect import bisect_right
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from attention_course.cells import grade_id, nbgrader_meta

from . import similarity_stage, structure
from .course import Course
from .discovery import discover
from .intake import Unusable, read_submission

K = 12  # tokens per k-gram: about one short statement once names are abstracted
W = 6  # winnowing window: any shared run of W + K - 1 = 17 tokens is found
THRESHOLD = 0.5  # share of the smaller submission's fingerprints (tests/test_similarity.py measures the margin)
MIN_FINGERPRINTS = 8  # a submission with fewer (mostly blank) is not paired: too little to judge
COMMON_SHARE = 0.2  # fingerprints owned by more than this share of the class are idioms...
COMMON_MIN = 8  # ...but never fewer than this many owners (a small class has no idioms to learn)
CSV_NAME = "similarity.csv"
CSV_FIELDS = ["chapter", "kind", "student_a", "student_b", "score", "shared", "fingerprints_a", "fingerprints_b",
              "note"]
# Code fingerprinted per submission, in normalised tokens: comments, blank lines, indentation and dropped no-ops
# count none, so padding cannot push copied code past it. The course's largest reference solution (chapter 10)
# has 7,512 tokens in the cells a learner owns (33,869 characters), and its whole notebook, tests included,
# 24,740. 64 K tokens is 8.7 times the first and 2.6 times the second: any work a learner wrote by hand fits; past
# it is generated text, and reading it would only let one submission spend the stage's budget. The raw text is
# bounded by the intake (1 MiB a cell, 4 MiB a notebook): the scanner reads all of it, linear, measured in
# autograder/similarity_stage.py.
TOKEN_CAP = 64 * 1024
# A string literal this long (quotes and prefix included) is also scanned as code, in place, one level deep:
# `exec("...")`, `compile`, `eval` or any decoding that keeps the source text in a literal is read as code.
# Shorter strings cannot hold the W + K - 1 = 17 tokens that a shared run needs to be caught for sure (17 tokens
# of code is about 40 characters at its tersest, `a=b(c,d)\ne=f(g,h)\n...`), and they are most of a notebook's
# strings (labels, dtype and device names, short messages): scanning them would only add noise.
CODE_STRING = 40


# ----------------------------------------------------------------------------------------------------
# 1. Normalise: one linear scanner
# ----------------------------------------------------------------------------------------------------
def _one_line_string(q: str) -> str:
    # Body: runs of ordinary characters, each escape consumed as a pair (a backslash-newline continues the
    # string); possessive, so nothing is looked at twice. Unterminated: it ends at the end of its line.
    return rf"{q}[^{q}\\\n]*+(?:\\[\s\S][^{q}\\\n]*+)*+{q}?"


def _triple_string(q: str) -> str:
    # A quote that does not start the closing triple is part of the body (the lookahead reads at most two
    # characters). Unterminated: it runs to the end of the cell.
    return rf"{q}{q}{q}[^{q}\\]*+(?:(?:\\[\s\S]|{q}(?!{q}{q}))[^{q}\\]*+)*+(?:{q}{q}{q})?"


# Every branch either matches a bounded number of characters or is a possessive loop over characters it then
# consumes, and a branch that fails does so within a bounded look (a string prefix and quote, at most 5
# characters; an operator, at most 3), so scanning a cell of n characters is O(n), and the last branch matches
# any character, so every character belongs to exactly one match. Sources reach it with "\n" line ends only.
TOKEN = re.compile("|".join([
    r"(?P<space>[^\S\n]++)",
    r"(?P<newline>\n)",
    r"(?P<join>\\\n)",
    r"(?P<comment>#[^\n]*+)",
    r"(?P<string>[rRbBuUfF]{0,2}(?:" + "|".join([_triple_string("'"), _triple_string('"'), _one_line_string("'"),
                                                   _one_line_string('"')]) + "))",
    r"(?P<number>\.?\d(?:[eE][+-]|[\w.])*+)",
    r"(?P<name>[^\W\d]\w*+)",
    r"(?P<op>\*\*=|//=|>>=|<<=|\.\.\.|->|:=|[-+*/%&|^@<>=!]=|\*\*|//|<<|>>|[\s\S])",
]))

_KEYWORDS = frozenset(keyword.kwlist)
_KEPT = _KEYWORDS | {"match", "case"}  # kept as themselves in the stream (soft keywords: as Python 3.10+ reads them)
_CONSTANTS = frozenset({"None", "True", "False"})
_COMPOUND = frozenset({"if", "elif", "else", "for", "while", "with", "def", "class", "try", "except", "finally",
                       "async", "match", "case"})  # a statement whose first ':' at depth 0 ends its header
_OPEN, _CLOSE = frozenset("([{"), frozenset(")]}")
# A statement's shape, followed token by token, to drop those that do nothing.
_START, _PASS, _CONST, _TARGET, _EQ, _EQNAME, _VALUE, _OTHER = range(8)
# ...and a call statement whose arguments are all literals or names (`id(0)`, `math.floor(x, 2)`): its callee
# (`_CALLEE`, after a dot `_DOT`), inside its parentheses (`_ARGS`), and closed (`_CALLED`, dropped at its end).
_CALLEE, _DOT, _ARGS, _CALLED = range(8, 12)
_MAX_TARGETS = 32  # `a = b = ... = 1`: a longer chain is not treated as a no-op


class Tokens:
    """A submission's normalised token stream: ``hashes[i]`` (crc32 of token i's normalised text, the same in
    every process), ``lines[i]`` (its 1-based line in its cell) and ``starts`` (the index of each cell's first
    token). ``vocab`` maps each distinct text to its hash while it is needed (:meth:`texts`)."""

    __slots__ = ("hashes", "lines", "starts", "vocab", "cut")

    def __init__(self) -> None:
        self.hashes = array("I")
        self.lines = array("i")
        self.starts: list[int] = []
        self.vocab: dict[str, int] = {}
        self.cut: tuple[int, int] | None = None  # (cell, line) where the cap stopped the reading

    def __len__(self) -> int:
        return len(self.hashes)

    def texts(self) -> list[str]:
        names = {h: t for t, h in self.vocab.items()}
        return [names[h] for h in self.hashes]

    def where(self, i: int) -> tuple[int, int]:
        """(cell, line) of token ``i``."""
        return bisect_right(self.starts, i) - 1, self.lines[i]


def _lines(source: str) -> str:
    return source.replace("\r\n", "\n").replace("\r", "\n")


_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[0-7]{1,3}|[\s\S])")
_SIMPLE = {"n": "\n", "r": "\n", "t": "\t", "\n": ""}


def _unescape(m: re.Match) -> str:
    e = m.group()[1:]
    if e in _SIMPLE:
        return _SIMPLE[e]
    if e[0] in "xuU" and len(e) > 1:
        return chr(min(int(e[1:], 16), 0x10FFFF))
    if e[0] in "01234567":
        return chr(int(e, 8))
    return e


def string_code(literal: str) -> str:
    """The text a string literal stands for, as code to scan (:data:`CODE_STRING`): its prefix and quotes
    removed, escapes decoded unless it is raw (one linear pass; line ends as ``\n``)."""
    body = literal.lstrip("rRbBuUfF")
    raw = "r" in literal[:len(literal) - len(body)].lower()
    q = body[:3] if body[:3] in ('"""', "'''") else body[:1]
    body = body[len(q):]
    if body.endswith(q):
        body = body[:-len(q)]
    return _lines(body if raw else _ESCAPE.sub(_unescape, body))


def normalise(cells: list[str], cap: int | None = None) -> Tokens:
    """The normalised token stream of a submission's code cells (see the module docstring): linear time and
    8 bytes of memory per token, whatever the cells hold. With ``cap``, at most that many tokens: the cell that
    passes it is cut there (``tokens.cut``: its index and the line of the first token not kept) and the cells
    after it are not read."""
    tokens = Tokens()
    for index, source in enumerate(cells):
        tokens.starts.append(len(tokens.hashes))
        _normalise_cell(_lines(source), tokens)
        if cap is not None and len(tokens.hashes) > cap:
            tokens.cut = (index, tokens.lines[cap])
            del tokens.hashes[cap:]
            del tokens.lines[cap:]
            break
    return tokens


def _normalise_cell(source: str, tokens: Tokens, nested: int | None = None) -> None:  # noqa: C901 - one pass
    hashes, lines, vocab = tokens.hashes, tokens.lines, tokens.vocab
    crc = zlib.crc32

    def emit(text: str, at: int) -> None:
        h = vocab.get(text)
        if h is None:
            h = vocab[text] = crc(text.encode("utf-8", "surrogatepass"))
        hashes.append(h)
        lines.append(at)

    cell_start = stmt_start = len(hashes)
    line, depth, header, prev = 1, 0, False, "\n"
    pending = None  # a name waiting for the next token, which decides how it is written: (text, line, chain, dotted)
    shape, targets, value, last_string, compound = _START, [], "", False, False
    loads: set[str] = set()  # names the cell reads (not assignment targets, attributes or keyword arguments)
    candidates: list[tuple[int, int, list[str]]] = []  # `name = constant`: dropped at the end if nothing reads it

    def resolve(nxt: str) -> None:
        text, at, chain, dotted = pending
        if text in _KEPT or dotted or (nxt == "=" and depth and not header):
            emit(text, at)  # a keyword, an attribute, a keyword argument's name: the API, not a choice of name
        else:
            emit("V", at)
            if not (chain and nxt == "=" and not depth):
                loads.add(text)

    def end(marker: bool) -> None:
        nonlocal stmt_start, shape, targets, compound
        if shape in (_PASS, _CONST, _CALLED) or (shape == _EQNAME and all(t == value for t in targets)):
            del hashes[stmt_start:]
            del lines[stmt_start:]
        else:
            if marker and len(hashes) > stmt_start:
                emit(";", line)
            if shape == _VALUE:
                candidates.append((stmt_start, len(hashes), targets))
        stmt_start, shape, targets, compound = len(hashes), _START, [], False

    for m in TOKEN.finditer(source):
        kind = m.lastgroup
        if kind == "space" or kind == "comment":
            continue
        if kind == "join":
            line += 1
            continue
        if kind == "newline":
            if depth:  # inside brackets: the statement goes on
                line += 1
                continue
            if pending is not None:
                resolve("\n")
                pending = None
            end(True)
            line += 1
            prev = "\n"
            continue
        text = m.group()
        if pending is not None:
            resolve(text)
            pending = None
        # The statement's shape: is it one of those that do nothing?
        before = shape
        if kind == "name":
            if shape == _START:
                if text == "pass":
                    shape = _PASS
                elif text in _CONSTANTS:
                    shape, last_string = _CONST, False
                elif text not in _KEYWORDS:
                    shape, targets = _TARGET, [text]
                    compound = text in _COMPOUND  # match / case
                else:
                    shape, compound = _OTHER, text in _COMPOUND
            elif shape == _DOT:
                shape = _CALLEE
            elif shape == _ARGS and (text in _CONSTANTS or text not in _KEYWORDS):
                pass
            elif shape == _EQ and text in _CONSTANTS:
                shape, last_string = _VALUE, False
            elif shape == _EQ and text not in _KEYWORDS:
                shape, value = _EQNAME, text
            else:
                shape = _OTHER
        elif kind == "string":
            if shape == _START or shape == _EQ:
                shape, last_string = (_CONST if shape == _START else _VALUE), True
            elif not ((shape == _CONST or shape == _VALUE) and last_string) and shape != _ARGS:
                shape = _OTHER
        elif kind == "number":
            shape = _CONST if shape == _START else _VALUE if shape == _EQ else _ARGS if shape == _ARGS else _OTHER
            last_string = False
        elif text == "=" and shape == _TARGET:
            shape = _EQ
        elif text == "=" and shape == _EQNAME and len(targets) < _MAX_TARGETS:
            shape = _EQ
            targets.append(value)
        elif text == "." and (shape == _TARGET or shape == _CALLEE):
            shape = _DOT
        elif text == "(" and (shape == _TARGET or shape == _CALLEE) and not depth:
            shape = _ARGS
        elif shape == _ARGS and (text == "," or text == "=" or text == "..."):
            pass
        elif shape == _ARGS and text == ")" and depth == 1:
            shape = _CALLED
        elif text == "..." and (shape == _START or shape == _EQ):
            shape, last_string = (_CONST if shape == _START else _VALUE), False
        else:
            shape = _OTHER
        # The token itself.
        if kind == "name":
            if text == "def":
                header = True  # a parameter list: its `name=` are parameters with defaults, plain names
            pending = (text, line, before == _START or before == _EQ, prev == ".")
        elif kind == "string":
            emit("L", line)
            if nested is None and len(text) >= CODE_STRING:  # it may hold code: exec("..."), compile, eval
                start = len(hashes)
                _normalise_cell(string_code(text), tokens, line)
                if len(hashes) > start:  # code in a literal is never a no-op: exec, eval or a decoder may run it
                    lines[start:] = array("i", [line]) * (len(hashes) - start)
                    shape = _OTHER
            line += text.count("\n")
        elif kind == "number":
            emit("L", line)
        elif text in _OPEN:
            depth += 1
            emit(text, line)
        elif text in _CLOSE:
            depth = max(0, depth - 1)
            emit(text, line)
        elif text == ":" and not depth:
            emit(text, line)
            header = False
            if compound:  # `if x: pass`: the body after the header is a statement of its own
                end(False)
        elif text == ";" and not depth:
            end(True)
        else:
            emit(text, line)
        prev = text
    if pending is not None:
        resolve("")
    end(True)
    drop = [(a, b) for a, b, names in candidates if loads.isdisjoint(names)]
    if drop:  # the unread `name = constant` statements, cut out in one linear pass
        kept_h, kept_l, at = array("I"), array("i"), cell_start
        for a, b in drop:
            kept_h.extend(hashes[at:a])
            kept_l.extend(lines[at:a])
            at = b
        kept_h.extend(hashes[at:])
        kept_l.extend(lines[at:])
        del hashes[cell_start:]
        del lines[cell_start:]
        hashes.extend(kept_h)
        lines.extend(kept_l)


# ----------------------------------------------------------------------------------------------------
# 2. Fingerprint
# ----------------------------------------------------------------------------------------------------
class Fingerprints:
    """The winnowed k-gram hashes of a token stream, in order, and where each k-gram starts."""

    __slots__ = ("hashes", "starts")

    def __init__(self) -> None:
        self.hashes = array("I")
        self.starts = array("i")

    def keys(self) -> set[int]:
        return set(self.hashes)

    def __len__(self) -> int:
        return len(self.hashes)


def fingerprints(tokens: Tokens, k: int | None = None, w: int | None = None) -> Fingerprints:
    """Winnowed k-gram hashes (crc32 of the k token hashes: the same submission gets the same fingerprints in
    every process). In each window of ``w`` consecutive k-grams the rightmost smallest hash is chosen (the
    paper's rule), once per k-gram; linear time."""
    k, w = k or K, w or W
    found = Fingerprints()
    n = len(tokens.hashes) - k + 1
    if n <= 0:
        return found
    raw = memoryview(tokens.hashes).cast("B")
    size = tokens.hashes.itemsize
    crc = zlib.crc32
    grams = array("I", (crc(raw[i * size:(i + k) * size]) for i in range(n)))
    w = min(w, n)
    low, pos, last = 0, -1, -1
    for end in range(w - 1, n):
        start = end - w + 1
        if pos < start:  # the smallest left the window: look at the whole window again (rightmost smallest)
            pos, low = start, grams[start]
            for j in range(start + 1, end + 1):
                if grams[j] <= low:
                    pos, low = j, grams[j]
        elif grams[end] <= low:
            pos, low = end, grams[end]
        if pos != last:
            found.hashes.append(low)
            found.starts.append(pos)
            last = pos
    return found


# ----------------------------------------------------------------------------------------------------
# 0. The code the grader runs from a learner
# ----------------------------------------------------------------------------------------------------
def code_view(nb) -> nbformat.NotebookNode:
    """A notebook as :func:`learner_code` needs it: each cell's type, id, text and nbgrader metadata only (the
    texts are shared, not copied; outputs and other metadata are left behind)."""
    cells = []
    for c in nb.get("cells", []) if isinstance(nb.get("cells"), list) else []:
        if not isinstance(c, dict):
            continue
        source = c.get("source", "")
        cell = {"cell_type": c.get("cell_type") if isinstance(c.get("cell_type"), str) else "raw",
                "source": source if isinstance(source, str) else "", "metadata": {}}
        if isinstance(c.get("id"), str):
            cell["id"] = c["id"]
        meta = c.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("nbgrader"), dict):
            cell["metadata"]["nbgrader"] = dict(meta["nbgrader"])
        if cell["cell_type"] == "code":
            cell.update(outputs=[], execution_count=None)
        cells.append(cell)
    return nbformat.from_dict({"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": cells})


def learner_code(nb, source, release=None) -> tuple[list[str], list[str], int]:
    """``(labels, sources, characters)``: the code cells grading runs as the learner's, in the order they run,
    with ``\\n`` line ends. :func:`autograder.structure.repair` decides, as for grading: the solution cells
    (labelled with their grade_id) and the learner's own cells (labelled ""), never the test and read-only cells,
    which grading restores from ``source``. All of it: the intake's budgets bound the text (autograder/intake.py),
    and :data:`TOKEN_CAP` what is fingerprinted of it. ``source``, ``release``: the chapter's source and release
    notebooks (or their :func:`code_view`)."""
    fixed = structure.repair(code_view(nb), code_view(source), code_view(release) if release is not None else None)
    labels, sources, total = [], [], 0
    for c in fixed.nb.cells:
        if c.get("cell_type") != "code":
            continue
        meta = nbgrader_meta(c)
        if meta and not meta.get("solution"):
            continue  # a test or read-only cell: the course's text, restored
        text = c.get("source", "")
        text = text if isinstance(text, str) else ""
        total += len(text)
        if text:
            gid = grade_id(c) if meta else None
            labels.append(gid if isinstance(gid, str) else "")
            sources.append(_lines(text))
    return labels, sources, total


@dataclass
class Submission:
    student: str
    cells: list[str]  # the learner's code cells (learner_code); once fingerprinted, those read, to the cap
    labels: list[str] = field(default_factory=list)  # each cell's grade_id, or "" for the learner's own cell
    characters: int = 0  # the code the submission holds
    cut: int = 0  # characters of code past the token cap, not read
    cap: int | None = TOKEN_CAP  # tokens fingerprinted at most (None: all; the course's own notebooks)
    tokens: Tokens | None = None
    found: Fingerprints | None = None
    prints: set[int] = field(default_factory=set)  # its fingerprints, less those removed as everyone's

    @classmethod
    def of(cls, student: str, nb, source, release=None, cap: int | None = TOKEN_CAP) -> "Submission":
        labels, cells, characters = learner_code(nb, source, release)
        return cls(student, cells, labels, characters, cap=cap)

    def fingerprint(self) -> "Submission":
        self.tokens = normalise(self.cells, self.cap)
        if self.tokens.cut is not None:  # keep only what was read (the side-by-side shows it)
            cell, line = self.tokens.cut
            kept = self.cells[cell].split("\n")[:line - 1]
            self.cells = [*self.cells[:cell], "\n".join(kept)]
            self.labels = self.labels[:cell + 1]
            self.cut = self.characters - sum(len(c) for c in self.cells)
        self.found = fingerprints(self.tokens)
        self.prints = self.found.keys()
        self.tokens.vocab = {}  # only for inspection; a class's worth of them is not kept
        return self

    def lines(self, hashes) -> set[tuple[int, int]]:
        """(cell, line) of every line a k-gram with one of ``hashes`` covers (linear in the tokens)."""
        covered: set[tuple[int, int]] = set()
        if self.found is None or self.tokens is None:
            return covered
        upto = 0  # tokens before this index are already covered: each token is looked at once
        for h, start in zip(self.found.hashes, self.found.starts):
            if h in hashes:
                for t in range(max(start, upto), start + K):
                    covered.add(self.tokens.where(t))
                upto = max(upto, start + K)
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
                "fingerprints_b": len(self.b.prints), "note": ""}


@dataclass
class Group:
    """Learners who share fingerprints that no other learner has, each too common to count in a pair (held by
    more than the class's idiom share), and together at least ``score`` of the smallest member's fingerprints."""
    members: list[Submission]
    shared: set[int]
    score: float

    def row(self, chapter: str) -> dict:
        return {"chapter": chapter, "kind": "group", "student_a": self.members[0].student,
                "student_b": "; ".join(m.student for m in self.members[1:]), "score": f"{self.score:.2f}",
                "shared": len(self.shared), "fingerprints_a": min(len(m.prints) for m in self.members),
                "fingerprints_b": max(len(m.prints) for m in self.members),
                "note": f"{len(self.members)} learners share these fingerprints, and no other learner does"}


@dataclass
class Note:
    """A submission the check could not read whole: cut at the cap, or not compared (with why, fixed text)."""
    student: str
    kind: str  # "cut" or "not compared"
    text: str

    def row(self, chapter: str) -> dict:
        return {"chapter": chapter, "kind": self.kind, "student_a": self.student, "student_b": "", "score": "",
                "shared": "", "fingerprints_a": "", "fingerprints_b": "", "note": self.text}


def cut_note(sub: Submission) -> Note:
    return Note(sub.student, "cut", f"compared its first {TOKEN_CAP:,} tokens of code, {sub.characters - sub.cut:,} "
                                    f"characters of {sub.characters:,} (the check reads at most {TOKEN_CAP:,} "
                                    f"tokens per submission; comments and blank lines count none)")


def _score(shared: int, a: Submission, b: Submission) -> float:
    return shared / max(1, min(len(a.prints), len(b.prints)))


def compare(subs: list[Submission], starter: Submission, reference: Submission | None = None,
            threshold: float = THRESHOLD) -> tuple[list[Pair], list[Pair], list[Group]]:
    """(pairs at or above ``threshold``, reference matches at or above it, groups at or above it), each sorted
    by score, highest first.

    Every submission's fingerprints lose the starter's, then (for the pairs) the reference's and the class's
    common ones; the common ones are first grouped by the exact set of learners that holds them (:class:`Group`).
    Fingerprints are computed here if a submission has none yet.
    """
    for s in (*subs, starter, *([reference] if reference else [])):
        if s.tokens is None:
            s.fingerprint()
    for s in subs:
        s.prints -= starter.prints
    matches = []
    if reference is not None:
        reference.prints -= starter.prints
        for s in subs:
            if len(s.prints) >= MIN_FINGERPRINTS:
                shared = reference.prints & s.prints
                score = _score(len(shared), s, reference)
                if score >= threshold:
                    matches.append(Pair(s, reference, shared, score, "reference"))
        for s in subs:
            s.prints -= reference.prints
    index: dict[int, list[int]] = defaultdict(list)
    for i, s in enumerate(subs):
        if len(s.prints) >= MIN_FINGERPRINTS:
            for h in s.prints:
                index[h].append(i)
    common = max(COMMON_MIN, int(COMMON_SHARE * len(subs)))
    # Before the common fingerprints are set aside as idioms: an idiom is written by many learners who each chose
    # the rest of their code, so the sets of learners that hold the class's idioms differ from idiom to idiom. A
    # ring of copies holds all of its copied code as one set: many fingerprints whose owners are exactly the ring.
    # Keyed by that owner set (a tuple of indexes, built in order: linear in the index's size), so a member who
    # changed a line still shares the rest with the ring.
    by_owners: dict[tuple[int, ...], list[int]] = defaultdict(list)
    for h, owners in index.items():
        if len(owners) > common:
            by_owners[tuple(owners)].append(h)
    groups = []
    for owners, held in by_owners.items():
        score = len(held) / max(1, min(len(subs[i].prints) for i in owners))
        if len(held) >= MIN_FINGERPRINTS and score >= threshold:
            groups.append(Group([subs[i] for i in owners], set(held), score))
    by_owners.clear()
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
    return (sorted(pairs, key=key), sorted(matches, key=key),
            sorted(groups, key=lambda g: (-g.score, g.members[0].student)))


# ----------------------------------------------------------------------------------------------------
# Presentation: escaped text only
# ----------------------------------------------------------------------------------------------------
def _side(sub: Submission, covered: set[tuple[int, int]]) -> str:
    """The submission's solution cells, and those of its other code cells that share a line, lines marked."""
    rows, quiet = [], 0
    touched = {cell for cell, _ in covered}
    for index, source in enumerate(sub.cells):
        label = sub.labels[index] if index < len(sub.labels) else ""
        if not label and index not in touched:
            quiet += 1
            continue
        rows.append(f'<div class="cell">{html.escape(label or "(a code cell without grade_id)")}</div>')
        for n, text in enumerate(source.split("\n"), start=1):
            line = html.escape(text) or " "
            rows.append(f"<mark>{line}</mark>" if (index, n) in covered else f"<span>{line}</span>")
    if quiet:
        rows.append(f'<div class="cell">({quiet} other code cell(s) without a shared line)</div>')
    return "<pre>" + "\n".join(rows) + "</pre>"


def side_by_side(pair: Pair) -> str:
    """Both submissions' code, the lines their shared fingerprints cover marked, as escaped HTML."""
    return ('<div class="sbs"><div><h4>' + html.escape(pair.a.student) + "</h4>"
            + _side(pair.a, pair.a.lines(pair.shared)) + "</div><div><h4>" + html.escape(pair.b.student)
            + "</h4>" + _side(pair.b, pair.b.lines(pair.shared)) + "</div></div>")


STYLE = (".sbs{display:grid;grid-template-columns:1fr 1fr;gap:1em}.sbs pre{font-size:12px;white-space:pre-wrap;"
         "border:1px solid #ccc;padding:.5em}.sbs mark{background:#ffe08a}.sbs .cell{color:#666;font-style:italic}")


def _notes_html(notes: list[Note]) -> str:
    if not notes:
        return ""
    return ("<p>Not read whole: " + "; ".join(f"{html.escape(n.student)} ({html.escape(n.kind)}: "
                                               f"{html.escape(n.text)})" for n in notes) + "</p>")


@dataclass
class ChapterResult:
    chapter: str
    learners: int
    pairs: list[Pair]
    reference: list[Pair]
    notes: list[Note] = field(default_factory=list)
    groups: list[Group] = field(default_factory=list)

    def rows(self) -> list[dict]:
        return [*(p.row(self.chapter) for p in (*self.reference, *self.groups, *self.pairs)),
                *(n.row(self.chapter) for n in self.notes)]

    def html(self) -> str:
        """The class report's section for this chapter (escaped text; no script)."""
        out = [f"<h3>{html.escape(self.chapter)}: {len(self.pairs)} similar pair(s) among {self.learners} "
               f"learners (threshold {THRESHOLD:.2f})</h3>"]
        if self.reference:
            out.append("<p>Matching the published reference solution: " + ", ".join(
                f"{html.escape(p.a.student)} ({p.score:.0%})" for p in self.reference) + "</p>")
        out.append(_notes_html(self.notes))
        for g in self.groups:
            out.append(f"<details><summary>A group of {len(g.members)} learners with the same code: "
                       + ", ".join(html.escape(m.student) for m in g.members)
                       + f" ({g.score:.0%} of the smallest submission, {len(g.shared)} fingerprints no other learner "
                       "has; the first two side by side)</summary>"
                       + side_by_side(Pair(g.members[0], g.members[1], g.shared, g.score)) + "</details>")
        for p in self.pairs:
            out.append(f"<details><summary>{html.escape(p.a.student)} and {html.escape(p.b.student)}: "
                       f"{p.score:.0%} of the shorter submission shared ({len(p.shared)} fingerprints)</summary>"
                       + side_by_side(p) + "</details>")
        return "\n".join(o for o in out if o)

    def section(self) -> "Section":
        return Section(self.chapter, self.learners, [p.row(self.chapter) for p in self.pairs],
                       [p.row(self.chapter) for p in self.reference], [n.row(self.chapter) for n in self.notes],
                       self.html(), [g.row(self.chapter) for g in self.groups])


def check_submissions(chapter: str, subs: list[Submission], release_nb, reference_nb=None,
                      threshold: float = THRESHOLD, notes: list[Note] | None = None) -> ChapterResult:
    """Similar pairs among ``subs`` (fingerprinted or not) of one chapter; ``reference_nb`` is the chapter's
    source notebook, whose cells decide which are the learner's (``release_nb`` when there is none)."""
    source = reference_nb if reference_nb is not None else release_nb
    starter = Submission.of("(release)", release_nb, source, release_nb, cap=None)
    reference = Submission.of("(reference solution)", reference_nb, source, release_nb, cap=None) \
        if reference_nb is not None else None
    pairs, matches, groups = compare(subs, starter, reference, threshold)
    notes = [*(notes or []), *(cut_note(s) for s in subs if s.cut)]
    return ChapterResult(chapter, len(subs) + sum(1 for n in notes if n.kind != "cut"), pairs, matches,
                         sorted(notes, key=lambda n: (n.student, n.kind)), groups)


def check_chapter(chapter: str, notebooks: list[tuple[str, object]], release_nb, reference_nb=None,
                  threshold: float = THRESHOLD) -> ChapterResult:
    """Similar pairs among ``notebooks`` (``[(student, notebook), ...]``) of one chapter, in this process."""
    source = code_view(reference_nb if reference_nb is not None else release_nb)
    release = code_view(release_nb)
    subs = [Submission.of(student, nb, source, release) for student, nb in notebooks]
    return check_submissions(chapter, subs, release, source if reference_nb is not None else None, threshold)


def compute(course: Course, chapters: list[str], submitted: Path, threshold: float = THRESHOLD) -> list[ChapterResult]:
    """The check itself, in this process: every chapter's submissions under nbgrader's ``submitted/`` layout,
    each read, cut to the learner's code and fingerprinted at once (only that is kept of it). A submission
    that cannot be read (the intake refuses it, or it needs more than the child's memory) is listed as "not
    compared", with why in the grader's words. :func:`run` calls this in the budgeted child."""
    views = {}
    for chapter in chapters:
        if course.release_notebook(chapter).is_file():
            views[chapter] = (code_view(nbformat.read(course.release_notebook(chapter), as_version=4)),
                              code_view(nbformat.read(course.source_notebook(chapter), as_version=4)))
    subs: dict[str, list[Submission]] = defaultdict(list)
    notes: dict[str, list[Note]] = defaultdict(list)
    for task in discover(submitted, chapters):
        if task.refusal or task.chapter not in views:
            continue  # not a regular notebook file: grading scores it zero with the reason
        release, source = views[task.chapter]
        why = ""
        try:
            nb, _ = read_submission(Path(task.path), task.chapter)
            sub = Submission.of(task.student, nb, source, release)
            nb = None
            subs[task.chapter].append(sub.fingerprint())
        except Unusable:  # grading says why; listed here too, so that no submission leaves the check unseen
            why = "not readable as a notebook (the grading report says why)"
        except MemoryError:
            why = "reading it needed more than the check's memory budget"
        except RecursionError:
            why = "nested too deeply to read"
        except Exception as exc:  # noqa: BLE001 - one notebook never stops the check; named by its type only
            why = f"an error in the check ({type(exc).__name__})"
        if why:
            nb = sub = None
            notes[task.chapter].append(Note(task.student, "not compared", why))
    return [check_submissions(ch, subs[ch], *views[ch], threshold, notes[ch])
            for ch in chapters if ch in views and (subs.get(ch) or notes.get(ch))]


# ----------------------------------------------------------------------------------------------------
# The stage: the check in a budgeted child; what comes back; similarity.csv
# ----------------------------------------------------------------------------------------------------
@dataclass
class Section:
    """One chapter's outcome as the child hands it back: the CSV rows and the report's escaped HTML section
    (the interface of :class:`ChapterResult` that ``grade`` and the class report use)."""
    chapter: str
    learners: int
    pairs: list[dict]
    reference: list[dict]
    notes: list[dict]
    body: str
    groups: list[dict] = field(default_factory=list)

    def rows(self) -> list[dict]:
        return [*self.reference, *self.groups, *self.pairs, *self.notes]

    def html(self) -> str:
        return self.body

    def to_json(self) -> dict:
        return {"chapter": self.chapter, "learners": self.learners, "pairs": self.pairs, "reference": self.reference,
                "notes": self.notes, "body": self.body, "groups": self.groups}

    @classmethod
    def from_json(cls, data: dict) -> "Section":
        return cls(str(data["chapter"]), int(data["learners"]), list(data["pairs"]), list(data["reference"]),
                   list(data["notes"]), str(data["body"]), list(data.get("groups", [])))

    @classmethod
    def stopped(cls, reason: str) -> "Section":
        """The section that stands for the whole check when its child did not finish."""
        row = {k: "" for k in CSV_FIELDS} | {"kind": "stopped", "note": reason}
        return cls("", 0, [], [], [row], f"<p><b>The check did not finish:</b> {html.escape(reason)}</p>")


@dataclass
class Stage:
    sections: list[Section]
    reason: str  # "" when the check finished; else why not (fixed text naming the budget)
    budget: similarity_stage.Budget
    limits: dict | None  # the limits the child reported it ran under
    csv_path: Path

    def line(self) -> str:
        """``grade``'s line for the stage."""
        if self.reason:
            return f"similarity: {self.reason} ({self.csv_path})"
        cut = sum(1 for s in self.sections for n in s.notes if n.get("kind") == "cut")
        skipped = sum(1 for s in self.sections for n in s.notes if n.get("kind") == "not compared")
        groups = sum(len(s.groups) for s in self.sections)
        extra = (f", {groups} group(s) of learners with the same code" if groups else "") + (
            f", {cut} cut at {TOKEN_CAP:,} tokens" if cut else "") + (
            f", {skipped} not compared" if skipped else "")
        return (f"similarity: {sum(len(s.pairs) for s in self.sections)} similar pair(s), "
                f"{sum(len(s.reference) for s in self.sections)} matching the reference{extra} ({self.csv_path})")


def _child_work(request: dict) -> dict:
    results = compute(Course(request["course"]), list(request["chapters"]), Path(request["submitted"]),
                      float(request["threshold"]))
    return {"sections": [r.section().to_json() for r in results]}


def run(course, chapters: list[str] | None = None, submitted: Path | None = None, threshold: float = THRESHOLD,
        budget: similarity_stage.Budget | None = None) -> Stage:
    """The check on every chapter's submissions, in a child with ``budget`` (default: the class's, from
    :meth:`similarity_stage.Budget.for_class`); writes ``similarity.csv``, a row saying so when it stopped."""
    chapters = list(chapters or course.chapters())
    submitted = Path(submitted) if submitted else course.grading / "submitted"
    if budget is None:
        budget = similarity_stage.Budget.for_class(sum(1 for t in discover(submitted, chapters) if not t.refusal))
    request = {"course": str(Path(course.root).resolve()), "chapters": chapters,
               "submitted": str(submitted.resolve()), "threshold": threshold}
    outcome = similarity_stage.run("autograder.similarity", request, budget)
    reason = ""
    try:
        sections = [Section.from_json(s) for s in outcome.result["sections"]] if outcome.result is not None else None
    except (KeyError, TypeError, ValueError):
        sections, outcome.reason = None, "stopped: its result was not readable"
    if sections is None:
        reason = (f"the check {outcome.reason} (its budget: {budget.describe()}); no submissions were compared, "
                  f"run `python -m autograder similarity` again")
        sections = [Section.stopped(reason)]
    path = write_csv(course.grading / CSV_NAME, sections)
    return Stage(sections, reason, budget, outcome.limits, path)


def write_csv(path: Path, results) -> Path:
    """``grading/similarity.csv``: one row per reference match, per similar pair and per submission not read
    whole, or one row saying the check stopped (ids are learner text: written through the grader's formula-safe
    CSV writer)."""
    # Here, not at the top: autograder.export imports nbgrader (2 s), and the stage's child, which imports this
    # module, never writes the CSV.
    from .export import safe_writer

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = safe_writer(f)
        writer.writerow(CSV_FIELDS)
        for r in results:
            for row in r.rows():
                writer.writerow([row.get(k, "") for k in CSV_FIELDS])
    tmp.replace(path)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder similarity", description=__doc__.split("\n")[0])
    parser.add_argument("chapters", nargs="*")
    parser.add_argument("--course", type=Path, default=None, help="course root (default: this repository)")
    parser.add_argument("--submitted", type=Path, default=None, help="default: grading/submitted")
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    args = parser.parse_args(argv)
    course = Course(args.course) if args.course else Course()
    stage = run(course, args.chapters or None, args.submitted, args.threshold)
    for s in stage.sections:
        if not s.chapter:
            continue
        print(f"{s.chapter}: {s.learners} learners, {len(s.pairs)} similar pair(s), "
              f"{len(s.reference)} matching the reference")
        for row in (*s.reference, *s.pairs):
            print(f"  {float(row['score']):4.0%}  {row['student_a']!a} ~ {row['student_b']!a}")
        for row in s.groups:
            print(f"  {float(row['score']):4.0%}  group: {row['student_a']!a}; {row['student_b']!a}")
        for row in s.notes:
            print(f"  {row['kind']}: {row['student_a']!a}: {row['note']}")
    print(stage.line())
    return 1 if stage.reason else 0


if __name__ == "__main__":  # the stage's child (autograder/similarity_stage.py)
    raise SystemExit(similarity_stage.child(sys.argv[1:], _child_work))
