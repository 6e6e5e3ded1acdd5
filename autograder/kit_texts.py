"""The English texts and cell ids the release and the kit add around the chapters, in one place that imports nothing:
the kit writes them (autograder/kit.py), the release places them (autograder/release.py), and the translation
catalogues read them (autograder/translations.py: ``locales/<lang>/LC_MESSAGES/kit.po`` translates them, keyed by
their paragraphs as for a chapter). Their ``{fields}`` are filled after translation, so a translation keeps them.
"""
from __future__ import annotations

GENERATED_NOTE_ID = "generated-note"  # release.py's note to maintainers ("edit the source"): not for learners
KIT_CELL_ID = "course-kit"  # the released notebook's first cell: install_markdown (not graded, no nbgrader metadata)
# Cells of a release that the release adds, not the chapter: the chapter's catalogue leaves them out.
ADDED_CELLS = frozenset({KIT_CELL_ID, GENERATED_NOTE_ID})

# "Get the course kit" (autograder/kit.py, install_markdown): the first cell of every release and the book's front
# page. The links are HTML anchors (see install_markdown).
INSTALL = (
    "**Get the course kit.** The chapters' notebooks import the course's package, `attention_course` (the set-up "
    'cell, the checks and the figures). Download <a href="{wheel_href}">{wheel}</a> from the course\'s site (its '
    "`{wheels}/` folder, beside the book's front page) and install it once, from the folder you saved it "
    "in, with Python 3.11 or newer (in a virtual environment: `python3 -m venv .venv`, then `.venv/bin/pip`):\n\n"
    "```bash\n{pip_line}\n```\n\n"
    "It brings PyTorch (the CPU build), NumPy, Matplotlib, JupyterLab and the self-check with it. Then open a "
    "chapter's notebook in that environment and run it from the top. Every chapter at once, for working offline: "
    '<a href="{zip_href}">{zip}</a> (unzip it and follow its README).'
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

# Where the README says PyTorch comes from, appended to its sentence "... PyTorch's CPU build{torch_note}." (a
# translation brings its own spacing: no space before Chinese punctuation).
TORCH_NOTE = " from {torch_index}"
