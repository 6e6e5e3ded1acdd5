"""Where things live in a course tree (the repository, or a copy of it made by the tests)."""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# nbgrader's course id (autograder/nbgrader_config.py says the same): the gradebook's course row and the exchange's
# folder of this course.
COURSE_ID = "attention-from-scratch"
# The translated releases' folders, by gettext language (autograder/translated_release.py writes them).
TRANSLATED_CHAPTERS = {"zh_CN": "chapters_zh"}


class Course:
    def __init__(self, root: Path = REPO_ROOT):
        self.root = Path(root).resolve()

    @property
    def solutions(self) -> Path:
        return self.root / "solutions"

    @property
    def chapters_dir(self) -> Path:
        return self.root / "chapters"

    @property
    def grading(self) -> Path:
        return self.root / "grading"

    @property
    def db_url(self) -> str:
        return "sqlite:///" + str(self.grading / "gradebook.db")

    def chapters(self) -> list[str]:
        """Chapter ids in course order: every solutions/<id>/<id>.ipynb."""
        return sorted(p.name for p in self.solutions.iterdir()
                      if p.is_dir() and (p / f"{p.name}.ipynb").is_file())

    def source_notebook(self, chapter: str) -> Path:
        return self.solutions / chapter / f"{chapter}.ipynb"

    def release_notebook(self, chapter: str) -> Path:
        return self.chapters_dir / chapter / f"{chapter}.ipynb"

    @property
    def locales(self) -> Path:
        """The translation catalogues: ``locales/<lang>/LC_MESSAGES/<domain>.po`` (issue 45)."""
        return self.root / "locales"

    def translated_chapters_dir(self, lang: str) -> Path:
        """Where the releases in ``lang`` lie (``chapters_zh/`` for zh_CN), beside the English ``chapters/``."""
        return self.root / TRANSLATED_CHAPTERS[lang]

    def translated_release_notebook(self, chapter: str, lang: str) -> Path:
        """The release of ``chapter`` in ``lang``: the same notebook name as the English one, so nbgrader, grade_ids
        and the gradebook treat both as the same notebook (a class may mix languages)."""
        return self.translated_chapters_dir(lang) / chapter / f"{chapter}.ipynb"

    def mistakes_file(self, chapter: str) -> Path:
        return self.solutions / chapter / "mistakes.toml"

    def nbgrader_env(self) -> dict:
        """Environment in which the nbgrader CLI reads this course's configuration."""
        env = dict(os.environ)
        # nbgrader shells out to `alembic`, which lives beside this interpreter.
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        env["JUPYTER_CONFIG_PATH"] = str(self.root / "autograder")
        env["ATTENTION_COURSE_ROOT"] = str(self.root)
        return env

    def copy_to(self, dest: Path, with_release: bool = True) -> "Course":
        """A throwaway copy of the course (sources, grading config, optionally the release)."""
        dest = Path(dest)
        dest.mkdir(parents=True, exist_ok=True)
        shutil.copytree(self.solutions, dest / "solutions")
        shutil.copytree(self.root / "autograder", dest / "autograder",
                        ignore=shutil.ignore_patterns("__pycache__"))
        if with_release and self.chapters_dir.is_dir():
            shutil.copytree(self.chapters_dir, dest / "chapters")
            for lang in TRANSLATED_CHAPTERS:
                if self.translated_chapters_dir(lang).is_dir():
                    shutil.copytree(self.translated_chapters_dir(lang), Course(dest).translated_chapters_dir(lang))
        if self.locales.is_dir():
            shutil.copytree(self.locales, dest / "locales")
        return Course(dest)
