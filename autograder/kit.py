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
Needs only the standard library and pip (no nbgrader), so a self-study learner can build it from a fresh clone.

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
from pathlib import Path

import attention_course

from .course import Course

# PyTorch's CPU wheels: on Linux, PyPI's torch is the CUDA build (several GB); this index holds the CPU one.
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
# The learner's packages, pinned as the course's requirements.txt pins them (one owner of the pins). jsonschema
# is not imported by learners' code, but JupyterLab and nbval load it: its pin (requirements.txt says why) spares
# every Jupyter and self-check process 0.7 s.
LEARNER_PACKAGES = ("torch", "numpy", "matplotlib", "ipykernel", "tqdm", "nbval", "pytest", "jsonschema")
# Not in the repository's requirements (nbgrader pulls it in there): the notebook interface itself.
JUPYTER = "jupyterlab>=4.6,<5"
GENERATED_NOTE_ID = "generated-note"  # release.py's note to maintainers ("edit the source"): not for learners
# The book's site: the wheel in a folder named as the kit's own (so one relative link works from a chapter's page,
# from its notebook in the kit and from the kit pulled into a hub), and the whole kit as one zip at the site's root.
SITE_WHEELS = "wheels"
SITE_ZIP = "attention-kit.zip"
KIT_CELL_ID = "course-kit"  # the released notebook's first cell: install_markdown (not graded, no nbgrader metadata)


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


def install_markdown(wheel: str, to_root: str) -> str:
    """"Get the course kit": what to install and where it lies on the book's site, as Markdown that Jupyter and the
    book both render. ``to_root`` is the way from the page (or notebook) to the site's root, e.g. ``../../`` from a
    chapter. The links are HTML anchors: the files are the site's, not the book's sources, so the book must not try
    to resolve them (a Markdown link to a file outside the sources is a build warning)."""
    wheel_href = f"{to_root}{SITE_WHEELS}/{wheel}"
    return (
        "**Get the course kit.** The chapters' notebooks import the course's package, `attention_course` (the set-up "
        f'cell, the checks and the figures). Download <a href="{wheel_href}">{wheel}</a> from the course\'s site (its '
        f"`{SITE_WHEELS}/` folder, beside the book's front page) and install it once, from the folder you saved it "
        "in, with Python 3.11 or newer (in a virtual environment: `python3 -m venv .venv`, then `.venv/bin/pip`):\n\n"
        f"```bash\n{pip_line(wheel)}\n```\n\n"
        "It brings PyTorch (the CPU build), NumPy, Matplotlib, JupyterLab and the self-check with it. Then open a "
        "chapter's notebook in that environment and run it from the top. Every chapter at once, for working offline: "
        f'<a href="{to_root}{SITE_ZIP}">{SITE_ZIP}</a> (unzip it and follow its README).'
    )


README = """# Attention from Scratch: learner kit

This folder is all you need to work through the course: the chapter notebooks, the course's helper package
(`attention_course`) and the reference outputs your notebook is compared with. It holds no solutions.

## Install (once)

Python 3.11 or newer (the course's NumPy needs it); nothing else. From this folder:

```bash
python3 -m venv .venv
.venv/bin/pip install -r requirements.txt
```

(On Windows: `py -m venv .venv` then `.venv\\Scripts\\pip install -r requirements.txt`.) The requirements
install PyTorch's CPU build{torch_note}.

## Work

```bash
.venv/bin/jupyter lab chapters/
```

Open a chapter, run the set-up cell, and replace every `raise NotImplementedError()` with your code. The check
cell under each exercise prints a ✓ per passed check; a failing check stops with a message naming the symptom.
A notebook downloaded from the course's web pages runs too, once this kit is installed: open it with the same
`.venv/bin/jupyter lab`.

## Check your notebook against the reference

Save your notebook, then:

```bash
.venv/bin/python -m attention_course check chapters/{example}/{example}.ipynb
```

It re-runs your notebook from the top on the CPU and compares every printed result with the reference outputs
shipped in this kit (not with what your notebook stored: those are your own). It names each cell that differs,
shows both texts and says which exercise to look at; it ends with `self-check passed` when everything matches.
Grading runs more (hidden) checks than the ones you see, so a passing self-check is a good sign, not a grade.

## Hand in

In a class, your instructor says how (an upload of the saved `.ipynb`, or the class's nbgrader exchange).

Chapters in this kit: {chapters}.
"""


def published(course: Course) -> tuple[list[Path], list[str]]:
    """What a learner can read of the course, as (files, texts): every file of ``chapters/`` (every chapter's
    release and what is released beside it: the book and the kit publish them; the self-check's reference outputs
    are taken from them), every file of the learner package (what the kit's wheel ships and the grader imports),
    the book's front page and the course's requirements; and the kit's own README. The grader treats a line of any
    of them as known to every learner (autograder/learner_files.py, hidden runs)."""
    roots = [course.chapters_dir, Path(attention_course.__file__).parent, course.root / "index.md",
             course.root / "requirements.txt"]
    files = []
    for root in roots:
        if root.is_file():
            files.append(root)
        elif root.is_dir():
            files += sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                            and p.suffix != ".pyc")
    return files, [README]


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


def build_wheel(course: Course, references: dict[str, dict], out: Path) -> Path:
    """``attention_course`` alone as a wheel, with the self-check's reference outputs as package data.

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
    with tempfile.TemporaryDirectory(prefix="kit-wheel-") as tmp:
        src = Path(tmp) / "src"
        shutil.copytree(course.root / "attention_course", src / "attention_course",
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "reference"))
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


def build_kit(course: Course, out: Path, torch_index: str | None = CPU_TORCH_INDEX,
              chapters: list[str] | None = None) -> Path:
    from attention_course.selfcheck import reference_outputs

    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise SystemExit(f"kit: {out} is not empty (the kit is written into an empty or new folder)")
    chapters = chapters or course.chapters()
    references = {}
    for chapter in chapters:
        release = course.release_notebook(chapter)
        if not release.is_file():
            raise SystemExit(f"kit: {chapter} has not been released (python -m autograder release {chapter})")
        nb = _learner_release(release)
        _write_notebook(nb, out / "chapters" / chapter / release.name)
        for extra in release.parent.iterdir():  # data files released with the chapter, if any
            if extra.name != release.name and not extra.name.startswith("."):
                copy = shutil.copytree if extra.is_dir() else shutil.copy2
                copy(extra, out / "chapters" / chapter / extra.name)
        references[chapter] = reference_outputs(nb)
    wheel = build_wheel(course, references, out / "wheels")
    pins = requirement_pins(course.root / "requirements.txt")
    (out / "requirements.txt").write_text(requirements_text(pins, wheel.name, torch_index))
    note = f" from {torch_index}" if torch_index else ""
    (out / "README.md").write_text(README.format(torch_note=note, example="03_scoring_functions"
                                                 if "03_scoring_functions" in chapters else chapters[0],
                                                 chapters=", ".join(chapters)))
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


def build_site_files(course: Course, site: Path) -> list[Path]:
    """The kit as the book's site offers it, written into ``site`` (the built book's html folder): the wheel at
    ``wheels/<wheel>`` and the whole kit at ``attention-kit.zip`` (PyTorch's CPU build in its requirements)."""
    with tempfile.TemporaryDirectory(prefix="site-kit-") as tmp:
        folder = build_kit(course, Path(tmp) / SITE_ZIP.removesuffix(".zip"))
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
    parser.add_argument("chapters", nargs="*", help="chapter ids (default: all)")
    args = parser.parse_args(argv)
    course = Course(args.course) if args.course else Course()
    torch_index = None if args.torch_index.lower() == "none" else args.torch_index
    out = build_kit(course, args.out, torch_index, args.chapters or None)
    print(f"kit written to {out}: {len(list((out / 'chapters').iterdir()))} chapters, "
          f"{next((out / 'wheels').glob('*.whl')).name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
