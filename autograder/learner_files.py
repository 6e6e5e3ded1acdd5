"""The files and names a learner controls in a submission folder, read without trusting any of them.

nbgrader's exchange gives every learner a writable inbox, and ``nbgrader collect`` copies whatever is there
into ``grading/submitted/<student>/<chapter>/``: the folder's name (the student id), the notebook,
``timestamp.txt`` and ``submission_secret.txt``, and anything else the learner put beside them (issue 24:
a timestamp that was not UTF-8 stopped the whole class; a symlink to the solution notebook, followed by
collect, earned full marks). The rules here:

- **A submission is regular files.** Nothing under a submission folder is followed or opened unless
  ``lstat`` says it is a regular file, and it is then opened with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO swapped
  in afterwards cannot block the grader) and read up to a size bound. A notebook that is a symbolic link,
  a FIFO, a device or a socket, or a hard link to one of the course's own files, is refused: the learner
  scores zero with the reason. Such an entry anywhere else in the folder is never read and is flagged.
- **Exchange files are data.** ``timestamp.txt`` and ``submission_secret.txt`` are read bounded, decoded
  strictly, and a file that is missing, unreadable, too large, not UTF-8 or (for the timestamp) not a date
  becomes a flag on that learner's result, never an exception.
- **A student id is data.** :func:`student_id` turns a folder name (bytes, as the filesystem holds it)
  into the id the gradebook records: printable text, at most :data:`MAX_ID_CHARS` characters, the same
  for the same folder on every run, different for different folders.
- **The course's hidden tests never come back as a learner's work.** :func:`hidden_test_lines` lists lines
  that only the course's source notebook holds (its hidden tests, which no release carries); a submission
  holding several of them is the course's own notebook (e.g. collected through a symlink) and scores zero.

Nothing here raises for a learner's input; every function returns what it found.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import re
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path

# nbgrader's own files are about 30 (timestamp) and 128 (secret) bytes; anything far larger is not theirs.
MAX_TIMESTAMP_BYTES = 256
MAX_SECRET_BYTES = 4096
# Entries looked at under one submission folder (a learner's folder of 10**6 files must not stall discovery).
MAX_ENTRIES = 2000
# nbgrader's gradebook keeps student ids in VARCHAR(128) columns (PostgreSQL enforces the length).
MAX_ID_CHARS = 128
EXCHANGE_FILES = ("timestamp.txt", "submission_secret.txt")
# A submission must hold at least this many of the course's hidden-test lines (each at least MIN_LINE_CHARS
# long, none of them in the release) to be taken for the course's own notebook: one line such as a seeded
# generator could be written independently; several verbatim, in a file the learner never saw, cannot.
MIN_HIDDEN_MATCHES = 3
MIN_LINE_CHARS = 30

HIDDEN_TESTS_REASON = ("the submission contains the course's hidden tests (it is a copy of the course's solution "
                       "notebook, not the learner's work)")


class NotReadable(Exception):
    """A learner's file that is not read; ``str(exc)`` says why (its kind, its size)."""


def kind(mode: int) -> str:
    """What an ``lstat`` mode is, in words."""
    for test, name in ((stat.S_ISREG, "regular file"), (stat.S_ISDIR, "folder"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "special file"


def read_bounded(path, limit: int) -> bytes:
    """The bytes of a regular file, never following a symbolic link, never blocking on a FIFO, never reading
    more than ``limit`` bytes. Raises :class:`NotReadable` otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise NotReadable("missing") from None
    except OSError as err:
        try:
            what = kind(os.lstat(path).st_mode)
        except OSError:
            what = "unreadable"
        raise NotReadable(what if what != "regular file" else f"unreadable ({err.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotReadable(kind(st.st_mode))
        if st.st_size > limit:
            raise NotReadable(f"too large ({st.st_size} bytes; at most {limit})")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:  # it grew while we read
                raise NotReadable(f"too large (more than {limit} bytes)")
        return b"".join(chunks)
    finally:
        os.close(fd)


# -- student ids ------------------------------------------------------------------------------------------
def _escape_char(ch: str) -> str:
    code = ord(ch)
    if code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0:
        return f"\\x{code:02x}"
    if 0xDC80 <= code <= 0xDCFF:  # an undecodable byte (surrogateescape)
        return f"\\x{code - 0xDC00:02x}"
    if code in (0x2028, 0x2029) or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069 or code == 0xFEFF:
        return f"\\u{code:04x}"  # line separators and bidirectional overrides: they reorder what a reader sees
    return ch


def student_id(name: bytes | str) -> tuple[str, list[str]]:
    """The id the gradebook records for a submission folder named ``name``, and flags saying how it differs.

    Undecodable bytes, control characters (newlines, escape codes), line separators and bidirectional
    overrides are written as backslash escapes, and a name longer than :data:`MAX_ID_CHARS` keeps its start
    and ends with a hash of the whole name. Two folders can then meet on one id (``a<newline>b`` and a folder
    literally named ``a\\x0ab``): :func:`unique_ids` parts them. Everything else, ``$``, ``=``, a leading ``-``, markup, is kept as it is: it is data, and every
    output escapes it where it is written (figures without mathtext, HTML escaped, CSV cells neutralised)."""
    if isinstance(name, str):
        name = os.fsencode(name)
    text = name.decode("utf-8", "surrogateescape")
    escaped = "".join(_escape_char(ch) for ch in text)
    flags = []
    if escaped != text:
        flags.append("the submission folder's name holds bytes that are not printable UTF-8 text; they are "
                     "recorded as backslash escapes")
    if len(escaped) > MAX_ID_CHARS:
        digest = hashlib.sha256(name).hexdigest()[:16]
        escaped = escaped[:MAX_ID_CHARS - 18] + "~" + digest
        flags.append(f"the submission folder's name is longer than {MAX_ID_CHARS} characters; it is recorded cut, "
                     "with a hash of the whole name")
    if flags:
        flags[-1] += f" (recorded id: {escaped})"
    return escaped, flags


def unique_ids(names: list[bytes]) -> dict[bytes, tuple[str, list[str]]]:
    """{folder name: (id, flags)} for every name, no two alike: a name whose id another name already has (in
    sorted order, so every run agrees) gets a hash of its bytes appended."""
    out: dict[bytes, tuple[str, list[str]]] = {}
    taken: set[str] = set()
    for name in sorted(names):
        sid, flags = student_id(name)
        if sid in taken:
            sid = sid[:MAX_ID_CHARS - 14] + "~" + hashlib.sha256(name).hexdigest()[:12]
            flags = flags + [f"another submission folder's name gives the same id; recorded as {sid}"]
        taken.add(sid)
        out[name] = (sid, flags)
    return out


# -- timestamps -------------------------------------------------------------------------------------------
_ZONE = re.compile(r"[A-Za-z][A-Za-z0-9_+\-]{0,39}(/[A-Za-z0-9_+\-]{1,40}){0,3}")


def parse_timestamp(text: str | None) -> _dt.datetime | None:
    """A submission time as nbgrader writes it (``2026-11-25 11:06:57.123456 UTC``, or ISO 8601), as naive
    UTC, or None when ``text`` is not a date. Time zone names are looked up only when they look like one
    (``Europe/Paris``): the name is learner text, and ``dateutil`` reads zone files by that name."""
    if not text or len(text) > MAX_TIMESTAMP_BYTES:
        return None
    from dateutil import parser as dateutil_parser
    from dateutil import tz as dateutil_tz

    text = text.strip()
    try:
        parts = text.split(" ")
        if len(parts) == 3 and parts[2] == "UTC":  # what nbgrader's submit writes: no parser needed (fast)
            try:
                when = _dt.datetime.fromisoformat(f"{parts[0]} {parts[1]}")
                if when.tzinfo is None:
                    return when
            except ValueError:
                pass
        if len(parts) == 3:  # "<date> <time> <zone>": nbgrader's own form
            zone_text = parts[2]
            if re.fullmatch(r"[+-]?\d{1,5}", zone_text):
                zone = int(zone_text)
            elif _ZONE.fullmatch(zone_text) and ".." not in zone_text:
                zone = dateutil_tz.gettz(zone_text)
            else:
                return None
            if zone is None:
                return None
            when = dateutil_parser.parse(f"{parts[0]} {parts[1]} TZ", tzinfos={"TZ": zone})
        else:
            when = dateutil_parser.parse(text)
        if when.tzinfo is not None:
            when = (when - when.utcoffset()).replace(tzinfo=None)
        return when
    except (ValueError, OverflowError, TypeError, ArithmeticError, LookupError):
        return None


# -- a submission folder ----------------------------------------------------------------------------------
@dataclass
class Folder:
    """What discovery learned from one ``<student>/<chapter>/`` folder."""
    refusal: str | None = None  # the notebook is not graded: zero with this reason
    flags: list[str] = field(default_factory=list)
    timestamp: str | None = None  # the submission time as text, when timestamp.txt holds a date
    exchange: dict[str, bytes] = field(default_factory=dict)  # valid exchange files, to copy beside feedback

    def digest(self) -> bytes:
        """What of this folder, besides the notebook, a resume key must cover (a fixed secret regrades)."""
        parts = [json.dumps([self.refusal, self.flags, self.timestamp]).encode()]
        parts += [name.encode() + b"\0" + data for name, data in sorted(self.exchange.items())]
        return hashlib.sha256(b"\0\0".join(parts)).digest()


def course_inodes(roots: list[Path]) -> set[tuple[int, int]]:
    """(device, inode) of every regular file under ``roots`` (the course's own files a hard link could reach)."""
    found = set()
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                try:
                    st = os.lstat(os.path.join(dirpath, name))
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    found.add((st.st_dev, st.st_ino))
    return found


def inspect_folder(folder: Path, notebook: Path, course_files: set[tuple[int, int]]) -> Folder:
    """Look at every entry under a submission folder with ``lstat`` (nothing is followed) and read its exchange
    files. The notebook itself is refused when it is not a regular file or is a hard link to a course file."""
    found = Folder()
    seen = 0
    stack = [folder]
    while stack:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError as err:
            found.flags.append(f"a folder of the submission could not be listed ({err.strerror}); not read")
            continue
        for entry in sorted(entries, key=lambda e: e.name):
            seen += 1
            if seen > MAX_ENTRIES:
                found.flags.append(f"the submission folder holds more than {MAX_ENTRIES} entries; the rest were "
                                   "not looked at")
                stack.clear()
                break
            path = Path(entry.path)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            is_notebook = path == notebook
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
            elif not stat.S_ISREG(st.st_mode):
                if is_notebook:
                    found.refusal = (f"the submitted notebook is a {kind(st.st_mode)}, not a regular file: refused "
                                     "(the grader reads only regular files)")
                else:
                    found.flags.append(f"refused {_shown(path.relative_to(folder))}: a {kind(st.st_mode)} (not read)")
            elif (st.st_dev, st.st_ino) in course_files:
                if is_notebook:
                    found.refusal = "the submitted notebook is a hard link to one of the course's own files: refused"
                else:
                    found.flags.append(f"refused {_shown(path.relative_to(folder))}: a hard link to one of the course's "
                                       "own files (not read)")
            elif st.st_nlink > 1 and is_notebook:
                # Graded (a backup made with `cp -al` links every file), but the instructor should know.
                found.flags.append(f"the submitted notebook is hard-linked elsewhere ({st.st_nlink} links)")
    _read_exchange_files(folder, found)
    return found


def _shown(rel: Path) -> str:
    return student_id(os.fsencode(str(rel)))[0][:200]


def _read_exchange_files(folder: Path, found: Folder) -> None:
    try:
        raw = read_bounded(folder / "timestamp.txt", MAX_TIMESTAMP_BYTES)
        text = raw.decode("utf-8").strip()
        if parse_timestamp(text) is None:
            found.flags.append("timestamp.txt is not a date: the submission time is not recorded")
        else:
            found.timestamp = text
            found.exchange["timestamp.txt"] = raw
    except NotReadable as err:
        if str(err) != "missing":
            found.flags.append(f"timestamp.txt not read ({err}): the submission time is not recorded")
    except UnicodeDecodeError:
        found.flags.append("timestamp.txt is not UTF-8 text: the submission time is not recorded")
    problem = None
    try:
        raw = read_bounded(folder / "submission_secret.txt", MAX_SECRET_BYTES)
        raw.decode("utf-8")
        if raw.strip():
            found.exchange["submission_secret.txt"] = raw
        else:
            problem = "is empty"
    except NotReadable as err:
        problem = "is missing" if str(err) == "missing" else f"not read ({err})"
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
    # A folder with neither file was placed there by hand, not through the exchange: nothing to release.
    if problem and (problem != "is missing" or os.path.lexists(folder / "timestamp.txt")):
        found.flags.append(f"submission_secret.txt {problem}: nbgrader's fetch_feedback cannot find this learner's "
                           "feedback page; hand it over directly (grading/feedback/<student>/<chapter>/)")


def feedback_exchange_files(found_exchange: dict[str, bytes]) -> dict[str, bytes]:
    """The two files nbgrader's ``release_feedback`` reads beside every feedback page (it stops for the whole
    class when one is missing or unreadable): the learner's own when they were valid; otherwise
    ``unknown`` for the time and a fresh secret that no learner holds, so that page is released under a name
    nobody fetches while everyone else's is released as usual (the flag tells the instructor)."""
    return {"timestamp.txt": found_exchange.get("timestamp.txt", b"unknown"),
            "submission_secret.txt": found_exchange.get("submission_secret.txt",
                                                        secrets.token_hex(64).encode())}


# -- the course's hidden tests --------------------------------------------------------------------------------
def _lines(text: str) -> set[str]:
    return {line.strip() for line in text.replace("\r\n", "\n").split("\n")}


def hidden_test_lines(source_nb, release_nb) -> set[str]:
    """Lines of the source notebook's hidden-test regions (``BEGIN HIDDEN TESTS`` .. ``END HIDDEN TESTS``) that
    are at least :data:`MIN_LINE_CHARS` long and appear nowhere in the release."""
    released = set()
    for cell in (release_nb.cells if release_nb is not None else []):
        released |= _lines(cell.source)
    hidden = set()
    for cell in source_nb.cells:
        inside = False
        for line in cell.source.replace("\r\n", "\n").split("\n"):
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and len(line.strip()) >= MIN_LINE_CHARS and line.strip() not in released:
                hidden.add(line.strip())
    return hidden


def carries_hidden_tests(content: bytes, hidden: set[str]) -> bool:
    """Whether a submitted notebook's cells hold at least :data:`MIN_HIDDEN_MATCHES` of the ``hidden`` lines
    (all of them, when the chapter has fewer). A file that is not a notebook carries nothing (the engine
    scores it zero with its own reason)."""
    if not hidden:
        return False
    try:
        data = json.loads(content.decode("utf-8", "replace"))
    except (ValueError, RecursionError):
        return False
    cells = data.get("cells") if isinstance(data, dict) else None
    if not isinstance(cells, list):
        return False
    seen: set[str] = set()
    for cell in cells:
        src = cell.get("source", "") if isinstance(cell, dict) else ""
        if isinstance(src, list):
            src = "".join(s for s in src if isinstance(s, str))
        if isinstance(src, str):
            seen |= _lines(src) & hidden
    return len(seen) >= min(MIN_HIDDEN_MATCHES, len(hidden))
