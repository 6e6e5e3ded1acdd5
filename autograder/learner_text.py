"""Learner text made safe to print and store: one line, no control characters, bounded; and never taken for the
grader's own words.

A result's reason, flags and messages are printed on the instructor's terminal (``grade``), stored in the gradebook,
written to grades.csv and the class report and shown on feedback pages. Text the kernel sends (an exception message,
a forged frame) is the learner's: terminal escape sequences (ANSI CSI/OSC), carriage returns, bells, bidirectional
overrides and zero-width characters are removed, line and paragraph breaks become spaces, and the result is cut to
``limit`` characters.

Clean text can still say anything ("grader bug, not the learner's fault -- please award full marks by hand", as an
exception's class name or message: issue 41, class 7). So a reason never quotes it: an exception is named by
:func:`exception_name` (a fixed list), and the text itself, where an instructor may want it, travels apart, in
``GradingResult.learner_said``, under a label in the grader's words.
"""
from __future__ import annotations

import builtins
import re
import unicodedata

# The exception names a reason may quote: Python's own, and a few that NumPy and PyTorch raise (a notebook that
# breaks with one of these has an ordinary bug). Any other class name is the learner's to choose, and so is a
# class that merely calls itself ValueError: the name says nothing more than the list allows.
LIBRARY_EXCEPTIONS = ("OutOfMemoryError", "LinAlgError", "AxisError", "JSONDecodeError", "UnpicklingError",
                      "PicklingError")
EXCEPTION_NAMES = frozenset(name for name, value in vars(builtins).items()
                            if isinstance(value, type) and issubclass(value, BaseException)) | set(LIBRARY_EXCEPTIONS)
OWN_CLASS = "an exception of its own class"
_RAISED = re.compile(r"\s*([A-Za-z_][\w.]{0,200}?)\s*(?::|$)")

# ESC [ ... final byte (CSI), ESC ] ... BEL or ESC \ (OSC, DCS, PM, APC, SOS), any other two-byte ESC sequence,
# and the one-byte C1 introducers (U+009B CSI, U+009D OSC) with what they introduce
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?|\x9b[0-?]*[ -/]*[@-~]?"
                      r"|[\x1b][\]PX^_][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"
                      r"|\x1b[@-Z\\-_]?")
_BREAKS = {"\n", "\r", "\t", "\v", "\f", "\x85", "\u2028", "\u2029"}
_REMOVED = {"Cc", "Cf", "Cs", "Co", "Cn"}  # controls, format (bidi, zero-width), surrogates, private, unassigned


def one_line(text, limit: int = 500) -> str:
    """``text`` as one printable line of at most ``limit`` characters."""
    text = _ESCAPES.sub("", str(text))
    out = []
    for ch in text:
        if ch in _BREAKS:
            out.append(" ")
        elif unicodedata.category(ch) not in _REMOVED:
            out.append(ch)
    line = " ".join("".join(out).split())
    return line if len(line) <= limit else line[: max(0, limit - 3)] + "..."


def printable(text, limit: int) -> str:
    """``text`` with escape sequences and control characters removed but its lines and spacing kept (a verdict
    message, a grader error's traceback), cut to its last ``limit`` characters (a traceback ends with the error)."""
    out = []
    for ch in _ESCAPES.sub("", str(text)):
        if ch == "\n":
            out.append(ch)
        elif ch in _BREAKS:
            out.append(" ")
        elif unicodedata.category(ch) not in _REMOVED:
            out.append(ch)
    kept = "".join(out)
    return kept if len(kept) <= limit else "..." + kept[-(limit - 3):]


def last_line(text, limit: int = 300) -> str:
    """The last non-empty line of ``text`` (split on newlines only: a carriage return is part of a line), made safe."""
    lines = [line for line in str(text).split("\n") if one_line(line)]
    return one_line(lines[-1] if lines else "", limit)


def exception_name(name) -> str:
    """An exception's class name as a reason may say it: one of :data:`EXCEPTION_NAMES`, else :data:`OWN_CLASS`."""
    name = str(name)
    return name if name in EXCEPTION_NAMES else OWN_CLASS


def raised_name(text) -> str:
    """The exception a traceback's text ends with (``pkg.ValueError: message``), by :func:`exception_name`; the
    message is never part of it."""
    found = _RAISED.match(last_line(text, 1000))
    return exception_name(found.group(1).rsplit(".", 1)[-1]) if found else OWN_CLASS
