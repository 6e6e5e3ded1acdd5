"""When did a submission arrive: the one owner of the submission time, and the ``collect`` command.

``python -m autograder collect CHAPTER [--exchange DIR] [--update]``

Everything in a learner's inbox entry is the learner's: the notebook, ``timestamp.txt``, the entry's name
(``student+chapter+timestamp+random``, which nbgrader's collect reads as the student id and the time), and every
file time a learner can set (``touch -d`` sets mtime and atime to any date). So none of them is the submission
time, and none of them says whose submission it is. What a learner cannot write is recorded here instead:

- **The time.** A file's inode change time (``st_ctime``) is set by the kernel to the current time on every
  change of the inode (creation, write, rename, link, chmod, chown) and no system call lets an unprivileged
  account set it to another value; only a change of the system clock (root) moves it. The latest ``ctime``
  over the inbox entry and everything in it (``lstat``, nothing followed) is therefore the moment the entry
  reached the state that was collected, with one exception: a learner can make it later (by touching the
  entry), and earlier only through a shared file mapping. After a first write through a ``MAP_SHARED``
  mapping, further writes through it change the file without touching its ``ctime`` until the kernel's
  writeback cleans the page, up to ``vm.dirty_expire_centisecs`` plus ``vm.dirty_writeback_centisecs`` later
  (30 s + 5 s on Linux's defaults and on this course's machine): work changed that way up to that long after
  the recorded time looks as if it arrived then. So ``collect`` reads the two settings and records the bound
  with the arrival (``ctime_lag_s``), and a submission whose recorded time lies within it before the due date
  while ``collect`` saw it only after the due date is *held for the instructor* (:attr:`Arrival.unsure_until`,
  ``late_policy.held``), never on time.
  The time ``collect`` looked at the entry is an upper bound too (a ``ctime`` in the future, e.g. from a file
  server's clock, is cut to it). The arrival time is the smaller of the two, read *after* the entry was copied,
  so a change while it was being copied moves it later, never earlier. An entry with more than
  :data:`learner_files.MAX_ENTRIES` entries is not copied past them; its time covers what was copied. Only
  what lies on the inbox's own filesystem counts: a filesystem a learner mounts inside their entry (FUSE,
  through the setuid ``fusermount``) answers ``stat`` with whatever times it likes, so it is neither read
  nor copied, and is flagged.
- **The learner.** The account that owns the inbox entry (its ``st_uid``: the exchange's inbox is
  ``drwx-wx-wt``, an entry there is created by, and belongs to, the account that submitted it) is the
  submission's learner, whatever id the entry's name claims. A mismatch is flagged, and the submission is
  recorded under the owner.
- **The binding.** Each record holds the SHA-256 of every notebook of the collected folder. A record applies
  to a submitted folder only while its notebook is byte for byte the one collected: a notebook placed or
  changed by hand in ``grading/submitted/`` later has no arrival time (``grade`` holds it for the instructor).

The learner's claims are kept as claims: the time in the entry's name is used only to choose among one
learner's own entries (the latest claimed, as nbgrader's collect does), and is kept in the record
(``claimed_time``), shown beside the trusted time, never used for lateness. The collected folder's
``timestamp.txt`` (the instructor's copy in ``grading/submitted/``) is then overwritten with the recorded arrival
that grading uses (:func:`stamp`), so nbgrader's own tools read the trusted time too: formgrader counts a
submission as autograded only when that file's time equals the gradebook's, and stock ``nbgrader autograde``
computes lateness from it.

The record is the append-only JSON-lines file ``grading/arrivals.jsonl`` (the instructor's, outside
``grading/submitted/``, which holds learner files). One line per observation: the latest line for a learner
and chapter whose notebook digest matches is the one that counts. ``collect`` writes lines with
``source: "collect"``; an instructor writes one with ``python -m autograder deadlines CHAPTER --received
STUDENT=ISO`` (``source: "instructor"``), e.g. for a notebook handed over by mail; a future JupyterHub service
that observes arrivals itself writes its own ``source`` through :func:`append`.

Copying: the chosen entry is copied into a private staging exchange (regular files and folders only; a symbolic
link, FIFO or device in the inbox is not followed, not copied, and flagged; every file read with ``O_NOFOLLOW``
and a size bound), under the owner's id, and nbgrader's own ``collect`` then runs on that staging exchange with
the course's configuration, so its ignore list, ``--update`` rule and folder layout are unchanged.
"""
from __future__ import annotations

import argparse
import base64
import datetime as _dt
import hashlib
import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from . import learner_files
from .atomic_files import append_line, read_records, write_atomic
from .parent_death import die_with_parent
from .course import COURSE_ID, Course

LEDGER_NAME = "arrivals.jsonl"
FORMAT_VERSION = 1
# A submitted folder's notebooks digested for the binding (its own notebook is one; a folder of thousands is not
# a submission anyone graded as given).
MAX_NOTEBOOKS = 64
MAX_NOTEBOOK_BYTES = 50 << 20  # autograder/intake.py's bound: a larger notebook is never graded anyway
# What one inbox entry may put on the instructor's disk through collect.
MAX_ENTRY_BYTES = 512 << 20
# How deep an inbox entry's folders may go. An nbgrader submission is a handful of files at depth 1 or 2; nbgrader's
# collect copies an entry with a recursive shutil.copytree, which a folder some hundreds of levels deep stops with
# a RecursionError (for the whole class), so a deeper entry is refused, not copied.
MAX_ENTRY_DEPTH = 16
MAX_LEDGER_BYTES = 256 << 20
SOURCES = ("collect", "instructor", "service")
MISMATCH = "the inbox entry's name claims another student than the account that owns it"
EXCHANGE_DEFAULT = "/usr/local/share/nbgrader/exchange"  # nbgrader's Exchange.root default
REFUSED = "flagged for the instructor"
# How long a change through a shared file mapping can precede the ctime that shows it: the kernel's writeback
# settings (Documentation/admin-guide/sysctl/vm.rst), in centiseconds. When they cannot be read: Linux's defaults
# doubled.
WRITEBACK_SETTINGS = ("/proc/sys/vm/dirty_expire_centisecs", "/proc/sys/vm/dirty_writeback_centisecs")
CTIME_LAG_DEFAULT_S = 70.0


def ctime_lag_bound_s() -> float:
    """Seconds a write through a shared mapping can stay unseen by ``ctime``: dirty_expire + dirty_writeback (a
    dirty page is written back, and the next write through the mapping faults and changes ``ctime``, at most
    that long after it was dirtied)."""
    try:
        centis = [int(Path(p).read_text().split()[0]) for p in WRITEBACK_SETTINGS]
    except (OSError, ValueError, IndexError):
        return CTIME_LAG_DEFAULT_S
    if any(c <= 0 for c in centis):  # 0 switches periodic writeback off: no bound the kernel keeps
        return CTIME_LAG_DEFAULT_S
    return sum(centis) / 100.0
NBGRADER_FAILED = "nbgrader's collect failed on this entry alone (the other entries were collected)"


class Refused(Exception):
    """An inbox entry that is not copied at all; ``str(exc)`` is a fixed sentence (no learner text)."""


# -- the record ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Arrival:
    """One observation of a submission's arrival."""
    chapter: str
    student: str  # the id it is recorded under: the owning account's name
    arrived: _dt.datetime  # naive UTC: the trusted submission time
    source: str  # "collect", "instructor", "service"
    notebooks: dict  # {file name: sha256 hex} of the collected folder's notebooks
    observed: _dt.datetime | None = None  # naive UTC: when it was recorded
    entry: str = ""  # the inbox entry's name (printable, as learner_files.student_id writes names)
    owner_uid: int | None = None
    claimed_id: str = ""  # the student id the entry's name claimed
    claimed_time: str = ""  # the time the entry's name claimed (the learner's)
    flags: tuple = ()  # what collect found wrong (an owner mismatch, refused links...)
    # How long a change through a shared file mapping can precede the ctime that shows it (ctime_lag_bound_s, read
    # when collect recorded this); None: not a collect observation, or a record from before it was recorded
    ctime_lag_s: float | None = None

    @property
    def unsure_until(self) -> _dt.datetime | None:
        """For a ``collect`` record: the latest moment the entry could have reached the collected state (the
        recorded time plus :attr:`ctime_lag_s`, at most when collect saw it); a due date between :attr:`arrived`
        and this is one the submission may have missed (``late_policy.held``). None for other sources. A collect
        record without the bound (written before it was recorded) takes :data:`CTIME_LAG_DEFAULT_S`."""
        if self.source != "collect" or self.observed is None:
            return None
        lag = self.ctime_lag_s if self.ctime_lag_s is not None else CTIME_LAG_DEFAULT_S
        return min(self.observed, self.arrived + _dt.timedelta(seconds=lag))

    def to_json(self) -> dict:
        data = asdict(self)
        data["arrived"] = _iso(self.arrived)
        data["observed"] = _iso(self.observed) if self.observed else None
        data["flags"] = list(self.flags)
        return {"v": FORMAT_VERSION, **data}

    @classmethod
    def from_json(cls, data) -> "Arrival":
        if not isinstance(data, dict) or data.get("v") != FORMAT_VERSION:
            raise ValueError("not an arrival record of this version")
        notebooks = data.get("notebooks")
        if not isinstance(notebooks, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                      for k, v in notebooks.items()):
            raise ValueError("notebooks is not {name: digest}")
        if data.get("source") not in SOURCES:
            raise ValueError("unknown source")
        flags = data.get("flags") or []
        if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags):
            raise ValueError("flags is not a list of text")
        uid = data.get("owner_uid")
        lag = data.get("ctime_lag_s")
        if lag is not None and (not isinstance(lag, (int, float)) or isinstance(lag, bool) or not 0 <= lag < 1e6):
            raise ValueError("ctime_lag_s is not a number of seconds")
        return cls(chapter=str(data["chapter"]), student=str(data["student"]),
                   arrived=_parse_iso(data["arrived"]), source=data["source"], notebooks=dict(notebooks),
                   observed=_parse_iso(data["observed"]) if data.get("observed") else None,
                   entry=str(data.get("entry") or ""), owner_uid=uid if isinstance(uid, int) else None,
                   claimed_id=str(data.get("claimed_id") or ""), claimed_time=str(data.get("claimed_time") or ""),
                   flags=tuple(flags), ctime_lag_s=float(lag) if lag is not None else None)

    def key(self) -> str:
        """What of this record can change a result (for the resume key): the time and the flags."""
        return json.dumps([_iso(self.arrived), self.source, list(self.flags)])

    def describe(self) -> str:
        """``2026-11-25 11:06:57 UTC (collect)``: the trusted time, for people."""
        return f"{self.arrived:%Y-%m-%d %H:%M:%S} UTC ({self.source})"


def _iso(when: _dt.datetime) -> str:
    return when.isoformat(timespec="microseconds")


def _parse_iso(text) -> _dt.datetime:
    when = _dt.datetime.fromisoformat(str(text))
    if when.tzinfo is not None:
        raise ValueError("arrival times are naive UTC")
    return when


def ledger_path(course: Course) -> Path:
    return course.grading / LEDGER_NAME


def append(path: Path, arrival: Arrival) -> None:
    """Add one record (atomic_files.append_line: whole lines, synced; :class:`Ledger` skips a torn last line)."""
    append_line(path, json.dumps(arrival.to_json(), sort_keys=True, ensure_ascii=True).encode())


class Ledger:
    """Every arrival record of a course, read once; :meth:`arrival_of` answers per submission."""

    def __init__(self, records: list[Arrival], skipped: int = 0):
        self.skipped = skipped  # lines that were not records (a torn last line after a crash)
        self._by_key: dict[tuple[str, str], list[Arrival]] = {}
        for record in records:
            self._by_key.setdefault((record.student, record.chapter), []).append(record)

    @classmethod
    def read(cls, path: Path) -> "Ledger":
        records, skipped = read_records(path, MAX_LEDGER_BYTES, Arrival.from_json, "the arrival record")
        return cls(records, skipped)

    def add(self, record: Arrival) -> None:
        """A record just appended to the file, as if read from it."""
        self._by_key.setdefault((record.student, record.chapter), []).append(record)

    def by_learner(self) -> dict[tuple[str, str], list[Arrival]]:
        """{(student, chapter): their records, oldest first}."""
        return {k: list(v) for k, v in self._by_key.items()}

    def records(self, student: str, chapter: str) -> list[Arrival]:
        return list(self._by_key.get((student, chapter), ()))

    def arrival_of(self, student: str, chapter: str, notebook_name: str, digest: str | None) -> Arrival | None:
        """The arrival of exactly this notebook of this learner and chapter, or None: the instructor's latest
        record of it if there is one (the instructor may correct a time either way), else the earliest one an
        observer recorded (the same bytes were there then; a later change of the inbox entry that left the
        notebook as it was does not make it late). ``digest``: :func:`notebook_digest` of the notebook graded."""
        if digest is None:
            return None
        matching = [r for r in self._by_key.get((student, chapter), ()) if r.notebooks.get(notebook_name) == digest]
        by_instructor = [r for r in matching if r.source == "instructor"]
        if by_instructor:
            return by_instructor[-1]
        return min(matching, key=lambda r: r.arrived, default=None)


def notebook_digest(data: bytes) -> str:
    """What a record binds a notebook by: the SHA-256 of its bytes (hex)."""
    return hashlib.sha256(data).hexdigest()


def notebook_digests(folder: Path) -> dict[str, str]:
    """{name: sha256} of the regular ``*.ipynb`` files directly in a collected folder (``lstat``; nothing
    followed, each read bounded)."""
    out: dict[str, str] = {}
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return out
    for entry in entries:
        # nbgrader's collect leaves out hidden files (the course's ignore list has ".*")
        if entry.name.startswith(".") or not entry.name.endswith(".ipynb") or len(out) >= MAX_NOTEBOOKS:
            continue
        try:
            data = learner_files.read_bounded(entry.path, MAX_NOTEBOOK_BYTES)
        except learner_files.NotReadable:
            continue
        out[entry.name] = notebook_digest(data)
    return out


def utc_now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc).replace(tzinfo=None)


def from_epoch(seconds: float) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(seconds, _dt.timezone.utc).replace(tzinfo=None)


def record_received(course: Course, chapter: str, student: str, when: _dt.datetime,
                    submitted: Path | None = None) -> Arrival:
    """The instructor's own record of when ``student``'s collected ``chapter`` arrived (naive UTC), bound to
    the notebook collected now. Raises ``LookupError`` when there is no collected notebook to bind it to."""
    folder = (submitted or course.grading / "submitted") / student / chapter
    notebooks = notebook_digests(folder)
    if not notebooks:
        raise LookupError(f"no collected notebook in {folder}")
    arrival = Arrival(chapter=chapter, student=student, arrived=when, source="instructor", notebooks=notebooks,
                      observed=utc_now())
    append(ledger_path(course), arrival)
    stamp(folder, Ledger.read(ledger_path(course)), student, chapter)
    return arrival


def stamp(folder: Path, ledger: "Ledger", student: str, chapter: str, notebooks: dict | None = None) -> None:
    """Write into the collected folder's ``timestamp.txt`` (nbgrader's format) the arrival grading will use for its
    notebook (:meth:`Ledger.arrival_of`), so formgrader and stock nbgrader see the gradebook's time. The learner's
    own file is in their inbox entry, and its claim in the record. ``notebooks``: the folder's digests, when the
    caller has just read them (collect has)."""
    notebooks = notebook_digests(folder) if notebooks is None else notebooks
    name = f"{chapter}.ipynb" if f"{chapter}.ipynb" in notebooks else next(iter(sorted(notebooks)), None)
    chosen = ledger.arrival_of(student, chapter, name, notebooks.get(name)) if name else None
    if chosen is not None:
        write_atomic(folder / "timestamp.txt", f"{chosen.arrived:%Y-%m-%d %H:%M:%S.%f} UTC")


# -- the inbox -----------------------------------------------------------------------------------------------
@dataclass
class InboxEntry:
    """One ``student+chapter+timestamp[+random]`` entry of the exchange's inbox, as ``lstat`` sees it."""
    path: Path
    name: str  # printable (learner_files.student_id of the name's bytes)
    claimed_id: str
    claimed_time: str
    claimed_when: _dt.datetime | None  # the claimed time, parsed strictly (None: not a date)
    owner_uid: int
    owner: str | None  # the owning account's name (None: no such account)


def owner_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def scan_inbox(inbound: Path, chapter: str) -> list[InboxEntry]:
    """The inbox entries of ``chapter`` (folders only: a symbolic link there is skipped, never followed)."""
    found = []
    try:
        inbox_device = os.stat(inbound).st_dev
        entries = sorted(os.scandir(os.fsencode(inbound)), key=lambda e: e.name)
    except OSError as err:
        raise RuntimeError(f"cannot list the exchange's inbox {inbound}: {err.strerror}") from None
    for entry in entries:
        parts = entry.name.rsplit(b"+", 3)
        if len(parts) < 3 or parts[1] != chapter.encode():
            continue
        try:
            st = os.lstat(entry.path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_dev != inbox_device:  # a mount there answers stat as it likes
            continue
        name = learner_files.student_id(entry.name)[0]
        claimed_id = learner_files.student_id(parts[0])[0]
        claimed_time = learner_files.student_id(parts[2])[0]
        found.append(InboxEntry(path=Path(os.fsdecode(entry.path)), name=name, claimed_id=claimed_id,
                                claimed_time=claimed_time,
                                claimed_when=learner_files.parse_timestamp(parts[2].decode("utf-8", "replace")),
                                owner_uid=st.st_uid, owner=owner_name(st.st_uid)))
    return found


def entry_id(entry: InboxEntry) -> tuple[str, int]:
    """An inbox entry as a record names it: its (printable) name and its owner's uid. nbgrader's submit names each
    entry with the learner's id, the time and a random suffix, so one name is one submission."""
    return entry.name, entry.owner_uid


def recorded_entries(ledger: "Ledger") -> set[tuple[str, int]]:
    """The inbox entries (:func:`entry_id`) that an arrival record already names: collected and recorded."""
    return {(r.entry, r.owner_uid) for records in ledger.by_learner().values() for r in records if r.entry}


def choose(entries: list[InboxEntry]) -> dict[str, InboxEntry]:
    """{owner: the entry collected for them}: among one account's own entries, the latest claimed time (as
    nbgrader's collect chooses; an entry whose claim is not a date comes first). Entries of no account are
    left out (there is nobody to record them under)."""
    chosen: dict[str, InboxEntry] = {}
    floor = _dt.datetime.min
    for entry in entries:
        if entry.owner is None:
            continue
        best = chosen.get(entry.owner)
        if best is None or (entry.claimed_when or floor, entry.name) > (best.claimed_when or floor, best.name):
            chosen[entry.owner] = entry
    return chosen


def latest_ctime(root: Path) -> tuple[float, int, bool]:
    """(latest ``st_ctime`` over ``root`` and everything under it, entries seen, whether all were seen). An
    entry on another filesystem than ``root`` (a FUSE mount, whose server answers ``stat`` with any time it
    likes) is not looked into; :func:`copy_entry` does not copy it."""
    top = os.lstat(root)
    latest = top.st_ctime
    seen, stack = 0, [root]
    while stack:
        current = stack.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            seen += 1
            if seen > learner_files.MAX_ENTRIES:
                return latest, seen - 1, False
            try:
                st = os.lstat(entry.path)
            except OSError:
                continue
            latest = max(latest, st.st_ctime)
            if stat.S_ISDIR(st.st_mode) and st.st_dev == top.st_dev:
                stack.append(Path(entry.path))
    return latest, seen, True


def copy_entry(src: Path, dest: Path) -> list[str]:
    """Copy an inbox entry: folders and regular files only, nothing followed, each file read with
    ``O_NOFOLLOW`` and bounded; returns flags for what was not copied. Raises :class:`Refused` (and the caller
    removes what was copied) for an entry past a budget: folders more than :data:`MAX_ENTRY_DEPTH` levels deep,
    more than :data:`learner_files.MAX_ENTRIES` entries, or more than :data:`MAX_ENTRY_BYTES` of files."""
    flags, seen, total = [], 0, 0
    stack = [(src, dest, 0)]
    device = os.lstat(src).st_dev
    dest.mkdir(mode=0o700)
    while stack:
        current, target, depth = stack.pop()
        try:
            entries = sorted(os.scandir(current), key=lambda e: e.name)
        except OSError as err:
            flags.append(f"a folder of the inbox entry could not be listed ({err.strerror}); not collected")
            continue
        for entry in entries:
            seen += 1
            if seen > learner_files.MAX_ENTRIES:
                raise Refused(f"the inbox entry holds more than {learner_files.MAX_ENTRIES} files and folders")
            try:
                st = os.lstat(entry.path)
            except OSError:
                continue
            out = target / entry.name
            if stat.S_ISDIR(st.st_mode) and depth + 1 > MAX_ENTRY_DEPTH:
                raise Refused(f"the inbox entry holds folders more than {MAX_ENTRY_DEPTH} levels deep")
            if stat.S_ISREG(st.st_mode) and total + st.st_size > MAX_ENTRY_BYTES:
                raise Refused(f"the inbox entry holds more than {MAX_ENTRY_BYTES >> 20} MiB of files")
            if st.st_dev != device:  # a mount inside the inbox: its times and files are whatever it says
                flags.append("an entry of the inbox entry was not collected: another filesystem mounted there")
            elif stat.S_ISDIR(st.st_mode):
                out.mkdir(mode=0o700)
                stack.append((Path(entry.path), out, depth + 1))
            elif stat.S_ISREG(st.st_mode):
                try:
                    data = learner_files.read_bounded(entry.path, max(0, MAX_ENTRY_BYTES - total))
                except learner_files.NotReadable as err:  # named by kind only: a file's name is the learner's text
                    flags.append(f"a file of the inbox entry was not collected: {err}")
                    continue
                total += len(data)
                out.write_bytes(data)
                os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))  # as nbgrader's copy2 keeps them
            else:
                flags.append(f"an entry of the inbox entry was not collected: a {learner_files.kind(st.st_mode)} "
                             "(not followed)")
    return flags


def _staged_name(entry: InboxEntry, owner: str, chapter: str) -> str:
    # nbgrader's collect reads the time from the name (its --update rule compares it with timestamp.txt): the
    # learner's claim when it is a date, as nbgrader would read it unstaged; the trusted time otherwise.
    claim = entry.claimed_time if entry.claimed_when is not None and "+" not in entry.claimed_time else None
    stamp = claim or f"{utc_now():%Y-%m-%d %H:%M:%S.%f} UTC"
    return f"{owner}+{chapter}+{stamp}+{base64.urlsafe_b64encode(os.urandom(9)).decode()}"


def exchange_root(course: Course) -> Path:
    """The exchange the course's nbgrader configuration names (nbgrader's default otherwise)."""
    from traitlets.config.loader import PyFileConfigLoader

    path = course.root / "autograder" / "nbgrader_config.py"
    config = PyFileConfigLoader(path.name, path=str(path.parent)).load_config()
    root = config.get("Exchange", {}).get("root") if "Exchange" in config else None
    return Path(root or EXCHANGE_DEFAULT)


def _nbgrader_collect(course: Course, chapter: str, root: Path, update: bool) -> int:
    args = [sys.executable, "-m", "nbgrader", "collect", chapter, f"--Exchange.root={root}", "--log-level=WARN"]
    if update:
        args.append("--update")
    # Its output is not shown: it names the learner's files. The caller says which entry failed, in fixed words.
    # It dies with this process: a collect killed half-way (serve under kill -9) leaves no nbgrader writing on.
    return subprocess.run(args, env=course.nbgrader_env(), cwd=course.root, capture_output=True,
                          preexec_fn=die_with_parent).returncode


@dataclass
class Collection:
    """What one ``collect`` did: the records written, and the owners whose chosen entry was not collected
    (refused past a budget, unreadable, or failed in nbgrader's collect), each with a fixed reason."""
    written: list
    not_collected: dict


def collect(course: Course, chapter: str, exchange: Path, update: bool = False, log=print,
            only: set[tuple[str, int]] | None = None) -> Collection:
    """Collect every learner's latest entry of ``chapter`` from ``exchange`` under the owning account, through
    nbgrader's collect, and record the arrival of each one collected. One entry never stops the others: an
    entry past a budget is refused before it is copied, and when nbgrader's collect fails on the staged entries
    together it runs again on each one alone, so only the failing entry is left out (one line each).

    ``only``: collect a learner only when their chosen entry is one of these (:func:`entry_id`), e.g. the entries
    no record names yet (:func:`recorded_entries`): ``serve`` collects each entry once, as it arrives."""
    inbound = exchange / COURSE_ID / "inbound"
    entries = scan_inbox(inbound, chapter)
    for entry in entries:
        if entry.owner is None:  # the entry's name is the learner's text: not printed
            log(f"skipped an inbox entry owned by uid {entry.owner_uid}, which is no account")
    chosen = choose(entries)
    if only is not None:
        chosen = {owner: entry for owner, entry in chosen.items() if entry_id(entry) in only}
    submitted = course.grading / "submitted"
    written, not_collected = [], {}
    lag = ctime_lag_bound_s()
    ledger = Ledger.read(ledger_path(course))

    def refuse(owner, reason):
        not_collected[owner] = reason
        log(f"{owner}: not collected: {reason}; {REFUSED}")

    with tempfile.TemporaryDirectory(prefix="collect-") as tmp:
        staging = Path(tmp) / "all" / COURSE_ID / "inbound"
        staging.mkdir(parents=True)
        staged: dict[str, tuple[InboxEntry, list[str], float, dict, Path]] = {}
        for owner, entry in sorted(chosen.items()):
            flags = []
            if entry.claimed_id != owner:  # the claimed id is the learner's text: kept in the record, not quoted here
                flags.append(f"{MISMATCH}: collected as the owner's ({owner}); the claimed id is in "
                             f"grading/{LEDGER_NAME}")
            target = staging / _staged_name(entry, owner, chapter)
            try:
                flags += copy_entry(entry.path, target)
                # After the copy: a change made while it was copied moves the time later, never earlier.
                ctime, _seen, complete = latest_ctime(entry.path)
            except Refused as err:
                shutil.rmtree(target, ignore_errors=True)
                refuse(owner, str(err))
                continue
            except OSError as err:
                shutil.rmtree(target, ignore_errors=True)
                refuse(owner, f"the inbox entry could not be read ({err.strerror})")
                continue
            observed = time.time()
            if not complete:
                flags.append(f"the inbox entry holds more than {learner_files.MAX_ENTRIES} entries: its time covers "
                             "the ones collected")
            if os.geteuid() == 0:  # nbgrader's check_owner compares the staged entry's owner with its name
                os.chown(target, entry.owner_uid, -1)
            staged[owner] = (entry, flags, min(ctime, observed), notebook_digests(target), target)
        if staged and _nbgrader_collect(course, chapter, Path(tmp) / "all", update) != 0:
            # Something in one entry stopped nbgrader's collect for all: each one alone, in an exchange of its own.
            for number, owner in enumerate(sorted(staged)):
                alone = Path(tmp) / f"alone-{number}"
                (alone / COURSE_ID / "inbound").mkdir(parents=True)
                target = staged[owner][4]
                os.rename(target, alone / COURSE_ID / "inbound" / target.name)
                status = _nbgrader_collect(course, chapter, alone, update)
                if status != 0:
                    del staged[owner]
                    refuse(owner, f"{NBGRADER_FAILED} (exit status {status})")
        for owner, (entry, flags, arrived, notebooks, _target) in sorted(staged.items()):
            folder = submitted / owner / chapter
            if not notebooks or notebook_digests(folder) != notebooks:
                log(f"{owner}: not collected (an earlier collection is kept; --update replaces it when the inbox "
                    "holds a newer one)" if notebooks else f"{owner}: the inbox entry holds no notebook")
                continue
            arrival = Arrival(chapter=chapter, student=owner, arrived=from_epoch(arrived), source="collect",
                              notebooks=notebooks, observed=utc_now(), entry=entry.name, owner_uid=entry.owner_uid,
                              claimed_id=entry.claimed_id, claimed_time=entry.claimed_time, flags=tuple(flags),
                              ctime_lag_s=lag)
            # Stamped before the record is appended: a kill in between leaves no record, so the next collect takes the
            # entry again and stamps it; the other order could leave a recorded entry never stamped.
            ledger.add(arrival)
            stamp(folder, ledger, owner, chapter, notebooks)  # the folder's digests, compared above
            append(ledger_path(course), arrival)
            written.append(arrival)
            log(f"{owner}: arrived {arrival.describe()}" + "".join(f"\n  flag: {f}" for f in flags))
    return Collection(written, not_collected)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder collect",
                                     description="Collect a chapter's submissions through nbgrader's collect, "
                                                 "recording when each arrived and whose it is (see "
                                                 "autograder/arrivals.py). Exit status 1: every other "
                                                 "entry was collected, and some learner's was not (each "
                                                 "named on a line of its own); 2: nothing was collected.")
    parser.add_argument("chapter", metavar="CHAPTER")
    parser.add_argument("--exchange", type=Path, metavar="DIR",
                        help="nbgrader's exchange root (default: the course configuration's Exchange.root)")
    parser.add_argument("--update", action="store_true",
                        help="replace an earlier collection when the inbox holds a newer one (nbgrader's --update)")
    parser.add_argument("--course", type=Path, metavar="DIR", help="course root (default: this repository)")
    args = parser.parse_args(argv)
    course = Course(args.course) if args.course else Course()
    try:
        done = collect(course, args.chapter, args.exchange or exchange_root(course), args.update)
    except RuntimeError as err:  # the exchange itself is not readable: nothing was collected
        print(f"collect stopped: {err}", file=sys.stderr)
        return 2
    print(f"{len(done.written)} submission(s) collected and recorded in {ledger_path(course)}")
    if done.not_collected:  # the others are collected; the status tells a script that someone was left out
        print(f"{len(done.not_collected)} learner(s) not collected, {REFUSED}: "
              f"{', '.join(sorted(done.not_collected))}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
