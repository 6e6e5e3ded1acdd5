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
  becomes a flag on that learner's result, never an exception. ``timestamp.txt`` is the learner's claim: it
  is shown beside the arrival time the instructor's side recorded (autograder/arrivals.py), never used for
  lateness, and :func:`parse_timestamp` reads only nbgrader's ``... UTC`` form and ISO 8601 with a numeric
  offset (a zone name is learner text, not a time).
- **A student id is data.** :func:`student_id` turns a folder name (bytes, as the filesystem holds it)
  into the id the gradebook records: printable text, at most :data:`MAX_ID_CHARS` characters, the same
  for the same folder on every run, different for different folders.
- **The course's hidden tests in a submission are evidence, not a score.** :func:`hidden_runs` lists the runs
  of consecutive hidden-test lines that no public file of the course holds; a submission holding one
  (:func:`copied_hidden_run`) may be the course's own notebook: graded as usual, and the instructor is told.

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
# nbgrader's own form (``2026-11-25 11:06:57.123456 UTC``) and ISO 8601 with a numeric offset or ``Z``. Nothing
# else: a zone *name* is looked up in the zone database, whose answer depends on the name the learner chose
# (``Pacific/Kiritimati`` is UTC+14), and a time without a zone is a guess.
_STAMP = re.compile(r"(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)"
                    r"(?: UTC|Z| ?([+-])(\d{2}):?(\d{2}))", re.ASCII)


def parse_timestamp(text: str | None) -> _dt.datetime | None:
    """A time as nbgrader writes it (``2026-11-25 11:06:57.123456 UTC``) or as ISO 8601 with a numeric offset
    (``2026-11-25T12:06:57+01:00``, ``...Z``), as naive UTC; None for anything else ("not a date"), including
    a zone name and a time without a zone. Learner text: it is matched, never looked up."""
    if not text or len(text) > MAX_TIMESTAMP_BYTES:
        return None
    match = _STAMP.fullmatch(text.strip())
    if match is None:
        return None
    day, clock, sign, hours, minutes = match.groups()
    try:
        when = _dt.datetime.fromisoformat(f"{day} {clock}")
        if sign:
            offset = _dt.timedelta(hours=int(hours), minutes=int(minutes))
            if offset >= _dt.timedelta(hours=24) or int(minutes) >= 60:
                return None
            when = when - offset if sign == "+" else when + offset
    except (ValueError, OverflowError):
        return None
    return when


# -- a submission folder ----------------------------------------------------------------------------------
@dataclass
class Folder:
    """What discovery learned from one ``<student>/<chapter>/`` folder."""
    refusal: str | None = None  # the notebook is not graded: zero with this reason
    flags: list[str] = field(default_factory=list)
    timestamp: str | None = None  # timestamp.txt as text, when it holds a date: the learner's claim, shown only
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
                else:  # named by its kind only: the entry's name is the learner's text (issue 41, class 7)
                    found.flags.append(f"refused an entry of the submission folder: a {kind(st.st_mode)} (not read)")
            elif (st.st_dev, st.st_ino) in course_files:
                if is_notebook:
                    found.refusal = "the submitted notebook is a hard link to one of the course's own files: refused"
                else:
                    found.flags.append("refused an entry of the submission folder: a hard link to one of the course's "
                                       "own files (not read)")
            elif st.st_nlink > 1 and is_notebook:
                # Graded (a backup made with `cp -al` links every file), but the instructor should know.
                found.flags.append(f"the submitted notebook is hard-linked elsewhere ({st.st_nlink} links)")
    _read_exchange_files(folder, found)
    return found


# timestamp.txt is the learner's claim: shown beside the time the instructor's side recorded, never used for
# lateness (autograder/arrivals.py owns the submission time), so a bad one costs nothing but its display.
CLAIM_NOT_SHOWN = "the learner's claimed submission time is not shown (lateness uses the recorded arrival)"


def _read_exchange_files(folder: Path, found: Folder) -> None:
    try:
        raw = read_bounded(folder / "timestamp.txt", MAX_TIMESTAMP_BYTES)
        text = raw.decode("utf-8").strip()
        if parse_timestamp(text) is None:
            found.flags.append(f"timestamp.txt is not a date: {CLAIM_NOT_SHOWN}")
        else:
            found.timestamp = text
            found.exchange["timestamp.txt"] = raw
    except NotReadable as err:
        if str(err) != "missing":
            found.flags.append(f"timestamp.txt not read ({err}): {CLAIM_NOT_SHOWN}")
        elif os.path.lexists(folder / "submission_secret.txt"):  # collected from the exchange, which writes both
            found.flags.append(f"timestamp.txt is missing: {CLAIM_NOT_SHOWN}")
    except UnicodeDecodeError:
        found.flags.append(f"timestamp.txt is not UTF-8 text: {CLAIM_NOT_SHOWN}")
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
# A copy of the course's own notebook (a symlink that `nbgrader collect` followed, a file passed around) holds its
# hidden tests, which no learner was given. That is evidence for the instructor, never a score: the notebook is
# graded as usual and the match is reported on the instructor's side only (GradingResult.suspicions), so no
# learner can use the grader to learn whether some lines are hidden-test lines (issue 41, class 4).
#
# Only lines that no public file of the course holds count: a line of a release (any chapter's), of the learner
# package or of the kit's own text (``g = torch.Generator().manual_seed(3)`` is in several) may be written by a
# learner who read it there. And they count only as a run of RUN_LINES consecutive lines of one hidden region, in
# that order, as consecutive lines of one submitted cell: one such line (``out, w = scaled_dot_product_attention(q,
# k, v)``) can be written independently, three in a row, verbatim, from a file the learner never saw, cannot. Three
# is also the most every region allows: chapter 7 has a region whose longest such run is three lines, so a longer
# run would miss a copy of it (tests/test_malformed_class.py checks that every region of every chapter has one).
RUN_LINES = 3
MIN_LINE_CHARS = 30  # shorter lines (``for d in dims:``, ``)``) are anyone's: they never count
SUSPICION = ("the notebook holds {n} consecutive lines of the course's hidden tests (test cell {cell}) that no "
             "public file of the course contains: it may be a copy of the course's solution notebook (graded as "
             "usual; not shown to the learner)")


def normal_line(line: str) -> str:
    """A line as the comparison sees it: no leading, trailing or repeated whitespace."""
    return " ".join(line.split())


def _strings(value, out: list[str], key: str = "") -> None:
    """Every text of a notebook's JSON (sources and outputs; base64 images left out), iteratively."""
    stack = [(key, value)]
    while stack:
        key, v = stack.pop()
        if key.startswith("image/"):
            continue
        if isinstance(v, str):
            out.append(v)
        elif isinstance(v, list) and all(isinstance(x, str) for x in v):
            out.append("".join(v))  # nbformat's list-of-lines source
        elif isinstance(v, list):
            stack.extend((key, x) for x in v)
        elif isinstance(v, dict):
            stack.extend(v.items())


def public_texts(files: list[Path], extra: list[str] = ()):
    """The text of every public file in ``files`` (a notebook's every source and output; any other file as
    UTF-8, undecodable bytes replaced), then ``extra`` (the kit's own texts), one at a time: what
    ``kit.published`` lists. The course's own files, not a learner's: about 0.8 MB of text today."""
    for path in files:
        try:
            raw = path.read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        if path.suffix == ".ipynb":
            try:
                texts: list[str] = []
                _strings(json.loads(raw), texts)
                yield "\n".join(texts)
                continue
            except (ValueError, RecursionError):
                pass
        yield raw
    yield from extra


@dataclass(frozen=True)
class HiddenRuns:
    """A chapter's hidden-test runs: ``{run of RUN_LINES normal lines: the grade_id of its test cell}``."""
    runs: dict = field(default_factory=dict)
    longest: int = 0  # characters of the longest line in a run: a longer submitted line is not compared

    def __bool__(self) -> bool:
        return bool(self.runs)


def hidden_runs(source_nb, public) -> HiddenRuns:
    """The runs of RUN_LINES consecutive non-blank lines of one hidden-test region (``BEGIN HIDDEN TESTS`` ..
    ``END HIDDEN TESTS``) of the source notebook in which every line is at least MIN_LINE_CHARS long and in no
    text of ``public`` (an iterable of texts, read once: :func:`public_texts` of ``kit.published``).

    Budget: memory for the chapter's hidden lines and one public file's text at a time (the texts are streamed);
    time one substring search per hidden line still counted and public text: 0.03 to 0.07 s per chapter for this
    course's 63 to 303 candidate lines against its 0.76 M characters of public text (each of the 10 chapters timed
    once on the 2-core development machine, 2026-11-27)."""
    regions: list[tuple[str, list[str]]] = []
    for cell in source_nb.cells:
        inside = False
        gid = (cell.get("metadata", {}).get("nbgrader", {}) or {}).get("grade_id", "?")
        for line in cell.source.replace("\r\n", "\n").split("\n"):
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
                regions.append((str(gid), []))
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside and line.strip():
                regions[-1][1].append(normal_line(line))
    candidates = {line for _, lines in regions for line in lines if len(line) >= MIN_LINE_CHARS}
    for text in public:
        if not candidates:
            break
        shown = "\n".join(normal_line(line) for line in text.split("\n"))  # a line never matches across lines
        candidates -= {line for line in candidates if line in shown}
    runs: dict[tuple[str, ...], str] = {}
    for gid, lines in regions:
        for i in range(len(lines) - RUN_LINES + 1):
            run = tuple(lines[i:i + RUN_LINES])
            if all(line in candidates for line in run):
                runs.setdefault(run, gid)
    return HiddenRuns(runs, max((len(line) for run in runs for line in run), default=0))


# A line that can be in a run: at least MIN_LINE_CHARS long as written (normalising only shortens a line) and not
# blank. Found by the regex engine, which skips every shorter line in C: a cell of millions of short lines costs
# one scan and no list of its lines. A non-blank line between two long ones breaks a run (_NON_SPACE).
_LONG_LINE = re.compile(r"^(?=[^\n]{%d})[^\n]*\S[^\n]*" % MIN_LINE_CHARS, re.M)
_NON_SPACE = re.compile(r"\S")


def copied_hidden_run(sources, hidden: HiddenRuns) -> str | None:
    """The grade_id of the test cell whose hidden run a submitted notebook's cell holds (``sources``: the cells'
    source texts), or None. Linear in the text and, besides it, in memory for one line and the last RUN_LINES
    normal lines: a line longer than any hidden line (indentation allowed for) is not normalised. A 50 MB cell
    of 17 million two-character lines: 0.35 s and no memory beyond the text (splitting it into a list of
    lines took 4 s and 1.3 GB)."""
    if not hidden:
        return None
    firsts = {run[0] for run in hidden.runs}
    limit = 4 * hidden.longest + 64  # leading indentation and inner spaces, normalised away, may be long
    for src in sources:
        if not isinstance(src, str):
            continue
        window: list[str | None] = []
        end = 0
        for line in _LONG_LINE.finditer(src):
            if window and _NON_SPACE.search(src, end, line.start()):
                window = []  # a shorter non-blank line came between: no run across it
            end = line.end()
            window.append(normal_line(line.group()) if end - line.start() <= limit else None)  # None: too long
            if len(window) > RUN_LINES:
                del window[0]
            if len(window) == RUN_LINES and window[0] in firsts:
                gid = hidden.runs.get(tuple(window))
                if gid is not None:
                    return gid
    return None


def suspicion(grade_id: str) -> str:
    """The instructor's note on a notebook that holds a hidden run (never shown to the learner)."""
    return SUSPICION.format(n=RUN_LINES, cell=grade_id)
