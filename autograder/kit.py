"""``python -m autograder kit --out DIR``: the learner kit, everything a learner needs and nothing else.

The kit is built from the same sources as the book and the gradebook:

- ``chapters/<chapter>/<chapter>.ipynb``: the published releases, with their reference outputs (no solution,
  no hidden test: nbgrader stripped them when the release was generated);
- ``wheels/attention_course-<version>-py3-none-any.whl``: the learner package alone (never ``autograder``),
  carrying in ``attention_course/reference/`` the reference outputs the self-check compares with
  (:func:`attention_course.selfcheck.reference_outputs` of each release);
- ``requirements.txt``: CPU PyTorch by default, the course's pins for NumPy, Matplotlib, nbval and pytest,
  JupyterLab, and the wheel itself;
- ``README.md``: how to install, work and check.

Solutions, hidden tests, mistake catalogues, reference profiles and the grader stay behind: the kit is made from
``chapters/`` and ``attention_course/`` only, and tests/test_kit.py runs the release's leak checks over it.
Needs no nbgrader (the course's requirements and pip), so a self-study learner can build it from a fresh clone.

``--lang zh`` builds the Chinese kit (issue 45): the Chinese releases (``chapters_zh/``, placed at the same
``chapters/<chapter>/`` paths), the README translated through ``locales/zh_CN/LC_MESSAGES/kit.po``, and a wheel
whose ``attention_course/kit_language`` makes Chinese the learner's default language (``ATTENTION_COURSE_LANG``
still decides where it is set).

The book's site offers the kit too (:func:`build_site_files`, called by the book's build: autograder/book_site.py):
the wheel at ``wheels/<wheel>`` (the same place relative to a chapter's page as to a chapter's notebook in the kit)
and the whole kit as ``attention-kit.zip``. :func:`install_markdown` is the one text that says how to install
them: the first cell of every released notebook (autograder/release.py) and the book's front page show it.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import attention_course

from . import kit_texts, notebook_text, translations
from .course import Course
from .kit_texts import GENERATED_NOTE_ID, KIT_CELL_ID

# PyTorch's CPU wheels: on Linux, PyPI's torch is the CUDA build (several GB); this index holds the CPU one.
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# The learner's packages, pinned as the course's requirements.txt pins them (one owner of the pins). jsonschema
# is not imported by learners' code, but JupyterLab and nbval load it: its pin (requirements.txt says why) spares
# every Jupyter and self-check process 0.7 s.
LEARNER_PACKAGES = ("torch", "numpy", "matplotlib", "ipykernel", "tqdm", "nbval", "pytest", "jsonschema")
# Not in the repository's requirements (nbgrader pulls it in there): the notebook interface itself.
JUPYTER = "jupyterlab>=4.6,<5"
# The book's site: the wheel in a folder named as the kit's own (so one relative link works from a chapter's page,
# from its notebook in the kit and from the kit pulled into a hub), and the whole kit as one zip at the site's root.
SITE_WHEELS = "wheels"
SITE_ZIP = "attention-kit.zip"
# The kit's language, one line in a file of the wheel's attention_course (attention_course/language.py reads it;
# only a kit in another language than English has one).
KIT_LANGUAGE_FILE = "kit_language"


def requirement_pins(requirements: Path) -> dict[str, str]:
    """``{package: its line}`` for the learner's packages in the course's requirements file."""
    pins = {}
    for line in requirements.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        name = re.match(r"[A-Za-z0-9_.-]+", line)
        if name and name.group(0).lower() in LEARNER_PACKAGES:
            pins[name.group(0).lower()] = line
    missing = [p for p in LEARNER_PACKAGES if p not in pins]
    if missing:
        raise SystemExit(f"kit: {requirements} does not pin {', '.join(missing)}")
    return pins


def requirements_text(pins: dict[str, str], wheel: str, torch_index: str | None) -> str:
    lines = ["# Everything a learner's environment needs: pip install -r requirements.txt (from this folder)."]
    if torch_index:
        lines += ["# PyTorch's CPU build (the notebooks run on any CPU; a GPU is optional and not needed).",
                  f"--extra-index-url {torch_index}"]
    lines += [pins[p] for p in LEARNER_PACKAGES] + [JUPYTER, "# The course's helper package (checks, set-up, figures).",
                                                    f"./wheels/{wheel}"]
    return "\n".join(lines) + "\n"


def wheel_filename(course: Course) -> str:
    """The name :func:`build_wheel` gives the learner package's wheel (a pure-Python wheel of the course's version):
    the install text names it before the wheel is built, and build_wheel checks that it did build that file."""
    project = tomllib.loads((course.root / "pyproject.toml").read_text())["project"]
    return f"{re.sub(r'[-_.]+', '_', project['name'])}-{project['version']}-py3-none-any.whl"


def wheel_requirements(course: Course) -> list[str]:
    """What the wheel declares it needs: the course's pins of the learner's packages and JupyterLab, as the kit's
    requirements.txt lists them, so installing the wheel alone gives an environment that runs every notebook."""
    pins = requirement_pins(course.root / "requirements.txt")
    return [pins[p] for p in LEARNER_PACKAGES] + [JUPYTER]


def pip_line(wheel: str, torch_index: str | None = CPU_TORCH_INDEX) -> str:
    """The one command that installs the course from its wheel, run in the folder the wheel was saved to."""
    index = f"--extra-index-url {torch_index} " if torch_index else ""
    return f"pip install {index}{wheel}"


def install_markdown(wheel: str, to_root: str, template: str = kit_texts.INSTALL) -> str:
    """"Get the course kit": what to install and where it lies on the book's site, as Markdown that Jupyter and the
    book both render. ``to_root`` is the way from the page (or notebook) to the site's root, e.g. ``../../`` from a
    chapter. The links are HTML anchors: the files are the site's, not the book's sources, so the book must not try
    to resolve them (a Markdown link to a file outside the sources is a build warning). ``template`` is
    :data:`kit_texts.INSTALL` or its translation (:func:`texts_in`)."""
    return template.format(wheel_href=f"{to_root}{SITE_WHEELS}/{wheel}", wheel=wheel, wheels=SITE_WHEELS,
                           pip_line=pip_line(wheel), zip_href=f"{to_root}{SITE_ZIP}", zip=SITE_ZIP)




def published(course: Course) -> tuple[list[Path], list[str]]:
    """What a learner can read of the course, as (files, texts): every file of ``chapters/`` and of the translated
    releases' folders (every chapter's release and what is released beside it: the book and the kit publish them;
    the self-check's reference outputs are taken from them), every file of the learner package (what the kit's
    wheel ships and the grader imports), the book's front page and the course's requirements; and the kit's own
    README in each language. The grader treats a line of any
    of them as known to every learner (autograder/learner_files.py, hidden runs)."""
    roots = [course.chapters_dir, *(course.translated_chapters_dir(lang) for lang in translations.LANGUAGES),
             Path(attention_course.__file__).parent, course.root / "index.md", course.root / "requirements.txt"]
    files = []
    for root in roots:
        if root.is_file():
            files.append(root)
        elif root.is_dir():
            files += sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                            and p.suffix != ".pyc")
    return files, [kit_texts.README, *(texts_in(course, lang).readme for lang in translations.LANGUAGES)]


def _learner_release(release: Path) -> dict:
    """The published release as a learner gets it: without the maintainers' note."""
    nb = json.loads(release.read_text())
    nb["cells"] = [c for c in nb["cells"] if c.get("id") != GENERATED_NOTE_ID]
    return nb


def _write_notebook(nb: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


def _can_build_here() -> bool:
    """Whether this interpreter's own setuptools builds the wheel (setuptools 64 or newer, with ``bdist_wheel``:
    built in from 70.1, from the ``wheel`` package before). Otherwise pip fetches a build backend."""
    try:
        from importlib.metadata import version

        major, minor = (int(x) for x in version("setuptools").split(".")[:2])
    except Exception:  # noqa: BLE001 - no setuptools, or a version we cannot read
        return False
    return (major, minor) >= (70, 1) or ((major, minor) >= (64, 0) and importlib.util.find_spec("wheel") is not None)


def build_wheel(course: Course, references: dict[str, dict], out: Path, lang: str | None = None) -> Path:
    """``attention_course`` alone as a wheel, with the self-check's reference outputs as package data, and for a kit
    in another language than English the file that says so (``attention_course/kit_language``, which
    :func:`attention_course.language.kit_language` reads: the learner's messages follow it).

    Built from a private copy with its own pyproject, so neither the repository's packaging (which also ships the
    grader, for the instructors' editable install) nor a stray file next to the package ends up in the kit."""
    config = tomllib.loads((course.root / "pyproject.toml").read_text())
    project = config["project"]
    # attention_course's packages and data files as the repository's packaging lists them (one owner: chapter 10's
    # corpus), and the self-check's reference outputs, which only the kit's wheel carries.
    setuptools = config["tool"]["setuptools"]
    ours = lambda name: name.split(".")[0] == "attention_course"  # noqa: E731
    packages = [p for p in setuptools["packages"] if ours(p)]
    package_data = {p: files for p, files in setuptools["package-data"].items() if ours(p)}
    if references:  # a kit of no chapter has no reference folder to list
        packages.append("attention_course.reference")
        package_data["attention_course.reference"] = ["*.json"]
    if lang:
        package_data["attention_course"] = [*package_data.get("attention_course", []), KIT_LANGUAGE_FILE]
    with tempfile.TemporaryDirectory(prefix="kit-wheel-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(course.root / "attention_course", src / "attention_course",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "reference", KIT_LANGUAGE_FILE))
        if lang:
            (src / "attention_course" / KIT_LANGUAGE_FILE).write_text(lang + "\n", encoding="utf-8")
        for chapter, ref in references.items():
            dest = src / "attention_course" / "reference" / f"{chapter}.json"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(json.dumps(ref))
        (src / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "{project["name"]}"\nversion = "{project["version"]}"\n'
            f'description = "{project["description"]}"\nrequires-python = "{project["requires-python"]}"\n'
            f"dependencies = {json.dumps(wheel_requirements(course))}\n\n"
            f'[tool.setuptools]\npackages = {json.dumps(packages)}\n\n[tool.setuptools.package-data]\n'
            + "".join(f'"{p}" = {json.dumps(files)}\n' for p, files in package_data.items()))
        out.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(src)]
        if _can_build_here():
            cmd.insert(5, "--no-build-isolation")  # offline: build with the setuptools already here
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"kit: building the attention_course wheel failed:\n{done.stdout}\n{done.stderr}")
    wheels = sorted(out.glob("attention_course-*.whl"))
    if [w.name for w in wheels] != [wheel_filename(course)]:
        raise SystemExit(f"kit: expected {wheel_filename(course)} in {out}, found {[w.name for w in wheels]}")
    return wheels[0]


@dataclass(frozen=True)
class KitTexts:
    """The texts the kit and the release add around the chapters, in one language (:mod:`autograder.kit_texts`),
    with the English keys the language's ``kit.po`` did not translate (those read in English)."""

    install: str  # the template of install_markdown
    readme: str  # the template of the kit's README.md
    torch_note: str  # the README's "from <index>"
    untranslated: tuple[str, ...] = ()


def texts_in(course: Course, lang: str | None) -> KitTexts:
    """The kit's texts in ``lang`` (None: English) from ``locales/<lang>/LC_MESSAGES/kit.po``."""
    if not lang:
        return KitTexts(kit_texts.INSTALL, kit_texts.README, kit_texts.TORCH_NOTE)
    translate = translations.lookup(course, translations.KIT_CATALOGUE, lang)
    install, missing = notebook_text.translate_markdown(kit_texts.INSTALL, translate)
    readme, more = notebook_text.translate_markdown(kit_texts.README, translate)
    note = translate(kit_texts.TORCH_NOTE.strip())
    missing += more + ([] if note else [kit_texts.TORCH_NOTE.strip()])
    return KitTexts(install, readme, note or kit_texts.TORCH_NOTE, tuple(missing))


def release_of(course: Course, chapter: str, lang: str | None) -> Path:
    """The release a kit in ``lang`` ships: the English one, or the translated one (``chapters_zh/``)."""
    return course.translated_release_notebook(chapter, lang) if lang else course.release_notebook(chapter)


def build_kit(course: Course, out: Path, torch_index: str | None = CPU_TORCH_INDEX,
              chapters: list[str] | None = None, lang: str | None = None) -> Path:
    """The kit in ``out``; ``lang`` (a gettext name, e.g. ``zh_CN``; None: English) picks its notebooks (the
    translated releases, under the same ``chapters/<id>/`` paths as an English kit's), its README and the language
    its messages default to. The self-check's reference outputs are the release's either way: a translated release
    keeps the English one's outputs (tests/test_translations.py)."""
    from attention_course.selfcheck import reference_outputs

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"kit: {out} is not empty (the kit is written into an empty or new folder)")
    chapters = chapters or course.chapters()
    texts = texts_in(course, lang)
    references = {}
    for chapter in chapters:
        release = release_of(course, chapter, lang)
        if not release.is_file():
            raise SystemExit(f"kit: {chapter} has not been released{f' in {lang}' if lang else ''} "
                             f"(python -m autograder release {'--lang ' + lang + ' ' if lang else ''}{chapter})")
        nb = _learner_release(release)
        _write_notebook(nb, out / "chapters" / chapter / release.name)
        for extra in release.parent.iterdir():  # data files released with the chapter, if any
            if extra.name != release.name and not extra.name.startswith("."):
                copy = shutil.copytree if extra.is_dir() else shutil.copy2
                copy(extra, out / "chapters" / chapter / extra.name)
        references[chapter] = reference_outputs(nb)
    wheel = build_wheel(course, references, out / "wheels", lang)
    pins = requirement_pins(course.root / "requirements.txt")
    (out / "requirements.txt").write_text(requirements_text(pins, wheel.name, torch_index))
    note = texts.torch_note.format(torch_index=torch_index) if torch_index else ""
    (out / "README.md").write_text(texts.readme.format(torch_note=note, example="03_scoring_functions"
                                                       if "03_scoring_functions" in chapters else chapters[0],
                                                       chapters=", ".join(chapters)), encoding="utf-8")
    return out


def _zip_folder(folder: Path, target: Path) -> None:
    """``folder`` as a zip holding ``<folder name>/...``: sorted entries with one fixed date, so the zip adds no build
    time or order of its own to what the files hold."""
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(p for p in folder.rglob("*") if p.is_file()):
            name = f"{folder.name}/{path.relative_to(folder).as_posix()}"
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())


def build_site_files(course: Course, site: Path, lang: str | None = None) -> list[Path]:
    """The kit as the book's site offers it, written into ``site`` (the built book's html folder): the wheel at
    ``wheels/<wheel>`` and the whole kit at ``attention-kit.zip`` (PyTorch's CPU build in its requirements); in
    ``lang`` (e.g. ``zh_CN``, for the Chinese edition's folder), or English."""
    with tempfile.TemporaryDirectory(prefix="site-kit-") as tmp:
        folder = build_kit(course, Path(tmp) / SITE_ZIP.removesuffix(".zip"), lang=lang)
        wheel = site / SITE_WHEELS / wheel_filename(course)
        wheel.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(folder / "wheels" / wheel.name, wheel)
        _zip_folder(folder, site / SITE_ZIP)
    return [wheel, site / SITE_ZIP]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder kit", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="an empty or new folder to write the kit into")
    parser.add_argument("--course", type=Path, default=None, help="the course tree (default: this repository)")
    parser.add_argument("--torch-index", default=CPU_TORCH_INDEX,
                        help=f"the package index for PyTorch in requirements.txt (default: the CPU build, "
                             f"{CPU_TORCH_INDEX}); 'none' leaves PyTorch to the default index")
    parser.add_argument("--lang", default="en",
                        help="the kit's language: en (default) or zh (its notebooks from chapters_zh/, its README, "
                             "and the language of its checks and self-check unless ATTENTION_COURSE_LANG says "
                             "otherwise)")
    parser.add_argument("chapters", nargs="*", help="chapter ids (default: all)")
    args = parser.parse_args(argv)
    course = Course(args.course) if args.course else Course()
    torch_index = None if args.torch_index.lower() == "none" else args.torch_index
    lang = None if args.lang.lower().startswith("en") else translations.language(args.lang)
    texts = texts_in(course, lang)
    if texts.untranslated:
        print(f"kit: {len(texts.untranslated)} text(s) of the kit have no {lang} translation and read in English "
              f"({translations.catalogue_path(course, translations.KIT_CATALOGUE, lang).relative_to(course.root)})",
              file=sys.stderr)
    out = build_kit(course, args.out, torch_index, args.chapters or None, lang)
    print(f"kit written to {out}: {len(list((out / 'chapters').iterdir()))} chapters, "
          f"{next((out / 'wheels').glob('*.whl')).name}{f', in {lang}' if lang else ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
