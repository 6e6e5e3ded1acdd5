"""Learner text made safe to put in a reason: one line, no control characters, bounded.

A reason is printed on the instructor's terminal (``grade``), stored in the gradebook and shown on feedback pages.
Text the kernel sends (an exception message, a forged frame) is the learner's: terminal escape sequences (ANSI
CSI/OSC), carriage returns, bells, bidirectional overrides and zero-width characters are removed, line and
paragraph breaks become spaces, and the result is cut to ``limit`` characters.
"""
from __future__ import annotations

import re
import unicodedata

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
