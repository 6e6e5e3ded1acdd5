"""The language learners and instructors read the course's messages in (issue 45), and the one lookup every
message goes through.

Which language
--------------
- A learner's process (the kernel's checks, the self-check): the environment variable ``ATTENTION_COURSE_LANG``
  (``zh``, ``zh_CN``, ``zh-CN``, ``en``, ...), else the language the course kit was built in (the one-line file
  :data:`KIT_LANGUAGE_FILE` beside this module, which ``python -m autograder kit --lang zh`` writes into the kit's
  wheel), else English. A value that names no language we have is passed over, so a typo never hides a message.
- The grader (a trusted process): the class's language from the course configuration, set with
  :func:`speaking` or :func:`use` (``autograder/class_language.py``); the grader never reads the environment
  variable or the kit's file for it, so what a learner's kernel claims never decides the feedback's language.

The lookup
----------
:func:`tr` looks an English message up in the active language's catalogue and fills its named fields. Messages are
keyed by their English text (gettext's convention), so English needs no catalogue and is what every lookup falls
back to: a message missing from a catalogue, or marked fuzzy there, reads in English. Text whose translation must
be looked up later than it is written (a module-level table) is marked with :func:`N_` where it is written.

The catalogue of this package is ``locales/<lang>/LC_MESSAGES/attention_course.po`` at the course's root (the file
translators edit), compiled to ``data/attention_course.<lang>.json`` in this package (package data, so the wheel
carries it: a learner installs the wheel without the repository): ``{English: translation}`` of every translated,
non-fuzzy entry, plain JSON that only the standard library reads and that a reviewer can read in a diff (gettext's
binary ``.mo`` is neither). ``python -m autograder messages compile`` writes it; tests/test_messages.py proves it in
sync with the ``.po``.

Check hints
-----------
The ``hint=`` and ``describe=`` texts of graded test cells stay English in the cell (nbgrader checksums it) and are
translated when a check shows them, by :func:`hint`: keyed by their English, per chapter in
``locales/<lang>/LC_MESSAGES/<chapter>.checks.po``. The package carries only the *visible* hints' translations
(``data/<chapter>.checks.<lang>.json``, written by ``python -m autograder translations update``); the hidden tests'
hints never reach a learner. The grader supplies the full table (visible and hidden, read from the repository's
catalogues) for a block with :func:`hints_from`. A key may carry named fields (``method {method!r}: ...``, from
an f-string): the shown text is matched against it and the values carried into the translation. Under stock
nbgrader (``python -m autograder nbgrader autograde``, on the instructor's machine) the kernels decide the checks:
the grader hands them its full table in the file :data:`GRADER_HINTS` names.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import json
import os
import re
from pathlib import Path
from typing import Callable, Mapping

ENVIRONMENT = "ATTENTION_COURSE_LANG"
ENGLISH = "en"
# The languages with a catalogue, by their gettext name; English is the messages' own text.
LANGUAGES = (ENGLISH, "zh_CN")
DOMAIN = "attention_course"
PACKAGE = Path(__file__).resolve().parent
# Compiled catalogues, data/<domain>.<lang>.json: flat in the package's data folder (a folder per language would be
# a folder the packaging has to be told about, as attention_course.data was).
LOCALE_DIR = PACKAGE / "data"
# The kit's language: one line (a language name, e.g. "zh_CN") in this file of the package, written only into a
# kit's wheel (``python -m autograder kit --lang zh``: autograder/kit.py, KIT_LANGUAGE_FILE); the repository has
# none (English).
KIT_LANGUAGE_FILE = PACKAGE / "kit_language"

# The check hints' compiled catalogues: data/<chapter><HINTS_SUFFIX>.<lang>.json, visible hints only.
HINTS_SUFFIX = ".checks"
# A key's named fields ({name}, {method!r}); what a key with fields matches in place of each.
# A JSON file {"language": ..., "hints": {English: translation}} the grader writes for the kernels stock nbgrader
# starts (autograder/__main__.py): hidden hints included, for the class's language. A learner who sets it can only
# point it at a file of their own.
GRADER_HINTS = "ATTENTION_COURSE_GRADER_HINTS"
HINT_FIELD = re.compile(r"\{([A-Za-z_]\w*)(![rsa])?\}")

_chosen: contextvars.ContextVar[str | None] = contextvars.ContextVar("attention_course_language", default=None)
HintSource = Callable[[str], Mapping[str, str]]  # language -> {English hint: translation}
_hint_source: contextvars.ContextVar[HintSource | None] = contextvars.ContextVar("attention_course_hints",
                                                                                  default=None)


def normalise(value) -> str | None:
    """The language ``value`` names, as one of :data:`LANGUAGES`, or None when it names none of them.

    ``zh``, ``zh_CN``, ``zh-CN``, ``zh-Hans``, ``zh_CN.UTF-8`` are Chinese; ``en``, ``en_GB``, ``C`` are English."""
    if not isinstance(value, str):
        return None
    text = value.strip().split(".", 1)[0].replace("-", "_").lower()
    if text in ("c", "posix") or text == "en" or text.startswith("en_"):
        return ENGLISH
    if text in ("zh", "zh_cn", "zh_hans", "zh_sg", "zh_hans_cn"):
        return "zh_CN"
    return None


@functools.lru_cache(maxsize=8)  # read once: the installed kit does not change under a running process
def kit_language(path: Path = KIT_LANGUAGE_FILE) -> str | None:
    """The language the installed course kit was built in, or None (no kit file: the repository's own package)."""
    try:
        return normalise(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None


def learner_language(environ=None, kit_file: Path = KIT_LANGUAGE_FILE) -> str:
    """A learner's language: ``ATTENTION_COURSE_LANG``, else the kit's, else English."""
    environ = os.environ if environ is None else environ
    return normalise(environ.get(ENVIRONMENT)) or kit_language(kit_file) or ENGLISH


def chosen() -> str | None:
    """The language a trusted caller chose for this context (:func:`speaking`, :func:`use`), or None."""
    return _chosen.get()


def active() -> str:
    """The language messages are written in now: the one a trusted caller chose (:func:`speaking`), else the
    learner's (:func:`learner_language`)."""
    return _chosen.get() or learner_language()


def use(language: str | None) -> contextvars.Token:
    """Write this process's (this context's) messages in ``language`` from now on (English when it names none we
    have). For a process that serves one class (a grading worker); returns the token :func:`restore` takes."""
    return _chosen.set(normalise(language) or ENGLISH)


def restore(token: contextvars.Token) -> None:
    _chosen.reset(token)


@contextlib.contextmanager
def speaking(language: str | None):
    """Messages written inside the block are in ``language`` (English when it names none we have)."""
    token = use(language)
    try:
        yield
    finally:
        restore(token)


def compiled_catalogue(language: str, domain: str = DOMAIN, localedir: Path = LOCALE_DIR) -> Path:
    return localedir / f"{domain}.{language}.json"


@functools.lru_cache(maxsize=None)
def catalogue(language: str, domain: str = DOMAIN, localedir: Path = LOCALE_DIR) -> dict[str, str]:
    """The compiled catalogue of ``domain`` in ``language``: ``{English: translation}``; empty for English or when
    there is none (everything then reads in English)."""
    if language == ENGLISH:
        return {}
    try:
        table = json.loads(compiled_catalogue(language, domain, localedir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(table, dict):
        return {}
    return {k: v for k, v in table.items() if isinstance(k, str) and isinstance(v, str)}


def render(template: str, english: str, fields: dict) -> str:
    """``template`` with its named fields filled; the English text when a translation does not format (a field
    it names that the English has not: the catalogue tests forbid it, the learner must never see a KeyError)."""
    try:
        return template.format(**fields) if fields else template
    except (KeyError, IndexError, ValueError):
        return english.format(**fields) if fields else english


def translate(msgid: str, language: str | None = None, domain: str = DOMAIN, localedir: Path = LOCALE_DIR,
              **fields) -> str:
    """``msgid`` in ``language`` (default: :func:`active`), its named fields filled with ``fields``."""
    language = (normalise(language) or ENGLISH) if language else active()
    template = catalogue(language, domain, localedir).get(msgid, msgid)
    return render(template, msgid, fields)


def tr(msgid: str, **fields) -> str:
    """A message of this package in the active language: ``tr("result has shape {got}", got=...)``. The first
    argument is always a literal (tests/test_messages.py collects every one and compares them with the catalogue)."""
    return translate(msgid, **fields)


def N_(msgid: str) -> str:  # noqa: N802 - gettext's name for "mark for translation, translate later"
    """Marks a literal as a message translated where it is used (``tr(TABLE[key])``); returns it unchanged."""
    return msgid


@functools.lru_cache(maxsize=None)
def packaged_hints(language: str, localedir: Path = LOCALE_DIR) -> dict[str, str]:
    """The visible check hints' translations this package carries, every chapter's together: ``{English:
    translation}``; empty for English."""
    if language == ENGLISH:
        return {}
    table: dict[str, str] = {}
    for path in sorted(localedir.glob(f"*{HINTS_SUFFIX}.{language}.json")):
        table.update(catalogue(language, path.name.removesuffix(f".{language}.json"), localedir))
    return table


@functools.lru_cache(maxsize=4)
def handed_hints(path: str, language: str) -> dict[str, str]:
    """The hint table of the grader's file at ``path`` (:data:`GRADER_HINTS`) if it is for ``language``, else {}."""
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    hints = data.get("hints") if isinstance(data, dict) and data.get("language") == language else None
    return {k: v for k, v in hints.items() if isinstance(k, str) and isinstance(v, str)} \
        if isinstance(hints, dict) else {}


@contextlib.contextmanager
def hints_from(source: HintSource):
    """Inside the block, :func:`hint` looks hints up in ``source(language)`` instead of the package's (visible-only)
    tables: the grader's, which holds the hidden tests' hints too (autograder/class_language.py)."""
    token = _hint_source.set(source)
    try:
        yield
    finally:
        _hint_source.reset(token)


def hint(text: str, language: str | None = None) -> str:
    """A check's hint or description in ``language`` (default: :func:`active`), English where there is none."""
    language = (normalise(language) or ENGLISH) if language else active()
    if language == ENGLISH or not isinstance(text, str) or not text:
        return text
    source = _hint_source.get()
    if source is not None:
        table = source(language)
    else:
        table = handed_hints(os.environ.get(GRADER_HINTS, ""), language) or packaged_hints(language)
    found = table.get(text)
    if found:
        return found
    for english, translation in table.items():  # a key with fields: match the shown text against it
        if "{" in english and (values := field_values(english, text)) is not None:
            return fill_fields(translation, values)
    return text


def field_pattern(key: str) -> re.Pattern | None:
    """A regular expression the texts of ``key`` (a key with named fields) match in full, or None without fields."""
    parts, pos, names = [], 0, set()
    for match in HINT_FIELD.finditer(key):
        if match.group(1) in names:
            parts.append(re.escape(unbrace(key[pos:match.start()])) + f"(?P={match.group(1)})")
        else:
            parts.append(re.escape(unbrace(key[pos:match.start()])) + f"(?P<{match.group(1)}>.+?)")
        names.add(match.group(1))
        pos = match.end()
    if not names:
        return None
    return re.compile("".join(parts) + re.escape(unbrace(key[pos:])), re.S)


def field_values(key: str, text: str) -> dict[str, str] | None:
    pattern = field_pattern(key)
    match = pattern.fullmatch(text) if pattern else None
    return match.groupdict() if match else None


def fill_fields(template: str, values: dict[str, str]) -> str:
    """``template`` with each named field replaced by the text it stood for (already converted: ``!r`` is in it)."""
    out, pos = [], 0
    for match in HINT_FIELD.finditer(template):
        out += [unbrace(template[pos:match.start()]), values.get(match.group(1), match.group(0))]
        pos = match.end()
    return "".join(out) + unbrace(template[pos:])


def unbrace(text: str) -> str:
    return text.replace("{{", "{").replace("}}", "}")
