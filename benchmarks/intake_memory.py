"""The trusted side's peak memory per submitted notebook, as a multiple of the file's size (issue 41, class 5).

Five files of chapter 3: the control (the reference solution, as ``submissions.reference`` writes it), 19 MB of
small JSON values (``[],``) in the notebook's metadata, 19 MB of small values (one-character printed lines) in a
cell's outputs, 19 MB of output in 1 kB lines (within every budget: graded), and a compact (no whitespace) file
of 50 MB, the intake's limit, of small values in metadata.
Each is read in a fresh process by a code tree (this repository, or an older checkout with ``--tree``, e.g.
``git worktree add /tmp/old-in 8f5e294``):

- ``intake``: ``intake.read_submission`` then ``structure.repair``, the trusted steps whose cost grows with the
  file: the peak resident memory of that process (``VmHWM``), plus, for a tree with a reader child
  (``autograder/bounded_json.py``), that child's own peak on the same file (tests/peak_memory.py: ``ru_maxrss``
  carries a parent's size over a fork, so the child is measured from a small launcher);
- ``grade-one`` (with ``--grade-one``): ``python -m autograder grade-one`` in-process: the peak of the grading
  process itself (its children, the sandbox and torch, are not the trusted side), plus the reader child's, and
  the wall time.

The ratio is the extra memory over the control's, in the same run, divided by the file's size:
``(self + child - (control's self + child)) / size``.

    .venv/bin/python benchmarks/intake_memory.py [--tree /tmp/old-in] [--grade-one] [--only meta19,out19]
    .venv/bin/python benchmarks/intake_memory.py --smoke   # the smallest size (tests/test_benchmarks.py runs it)

``--scale F`` multiplies the four files' sizes (the names keep the full sizes); ``--smoke`` is ``--scale 0.02``
(0.4 MB and 1 MB files) on the intake step: the ratios of files that small are dominated by the interpreter and say
little; the smoke run checks that every file is still written and measured.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from autograder import bounded_json, intake, safe_output, submissions  # noqa: E402
from autograder.course import Course  # noqa: E402
from tests.peak_memory import VMHWM, peak  # noqa: E402

CHAPTER = "03_scoring_functions"
MB = 1_000_000

INTAKE = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
import nbformat
from autograder import intake, structure
from autograder.course import Course
course = Course(sys.argv[1])
source = nbformat.read(course.source_notebook(sys.argv[3]), as_version=4)
release = nbformat.read(course.release_notebook(sys.argv[3]), as_version=4)
started = time.monotonic()
try:
    nb, _ = intake.read_submission(sys.argv[2], sys.argv[3])
    structure.repair(nb, source, release)
    outcome = "accepted"
except intake.Unusable as exc:
    outcome = "refused: " + str(exc)
print(json.dumps({"outcome": outcome, "self": VMHWM, "seconds": time.monotonic() - started}))
"""

GRADE_ONE = """
import contextlib, io, json, os, sys, time
sys.path.insert(0, sys.argv[1])
os.chdir(sys.argv[1])
from autograder.__main__ import main
started = time.monotonic()
with contextlib.redirect_stdout(io.StringIO()):
    main(["grade-one", sys.argv[3], sys.argv[2], "--json", sys.argv[4]])
result = json.load(open(sys.argv[4]))
print(json.dumps({"outcome": result["status"] + ": " + (result.get("reason") or f"{result.get('score')}"),
                  "self": VMHWM, "seconds": time.monotonic() - started}))
"""


SMOKE_SCALE = 0.02


def files(course: Course, folder: Path, scale: float = 1.0) -> dict[str, Path]:
    """The five notebooks, each as ``<folder>/<name>/<chapter>.ipynb`` (the four large ones at ``scale`` times their
    size)."""
    mb = int(MB * scale)
    control = json.loads(nbformat.writes(submissions.reference(course, CHAPTER)))
    out = {}

    def write(name: str, data: bytes) -> None:
        path = folder / name / f"{CHAPTER}.ipynb"
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        out[name] = path

    write("control", nbformat.writes(nbformat.from_dict(control)).encode())
    meta = dict(control, metadata=dict(control["metadata"], x="@X@"))
    text = json.dumps(meta, indent=1).encode()
    write("meta19", text.replace(b'"@X@"', b"[" + b"[]," * ((19 * mb - len(text)) // 3) + b"[]]"))
    outs = json.loads(json.dumps(control))
    outs["cells"][0]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "@X@"}]
    text = json.dumps(outs, indent=1).encode()
    write("out19", text.replace(b'"@X@"', b"[" + b'"a",' * ((19 * mb - len(text)) // 4) + b'"a"]'))
    long_lines = json.loads(json.dumps(outs))  # honest-looking: 19 MB of output in 1 kB lines, within every budget
    long_lines["cells"][0]["outputs"][0]["text"] = ["a" * 999 + "\n" for _ in range((19 * mb - len(text)) // 1004)]
    write("long19", json.dumps(long_lines, indent=1).encode())
    text = json.dumps(meta, separators=(",", ":")).encode()
    write("compact50", text.replace(b'"@X@"', b"[" + b"[]," * ((50 * mb - len(text)) // 3) + b"[]]"))
    return out


def measure(code: str, tree: Path, path: Path, *extra: str) -> dict:
    done = subprocess.run([sys.executable, "-c", code.replace("VMHWM", VMHWM), str(tree), str(path), CHAPTER, *extra],
                          capture_output=True, text=True, cwd=tree)
    if done.returncode != 0:
        return {"outcome": "crashed: " + done.stderr.strip().splitlines()[-1][:200], "self": 0, "child": 0,
                "seconds": 0.0}
    found = json.loads(done.stdout.strip().splitlines()[-1])
    found["child"] = 0
    if (tree / "autograder" / "bounded_json.py").is_file():  # this tree's reader, on the same file
        found["child"] = peak(bounded_json.child_command(path, intake.BUDGET, safe_output.CELL_METADATA,
                                                         safe_output.NOTEBOOK_METADATA))[1]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=ROOT, help="the code tree to measure (default: this one)")
    parser.add_argument("--grade-one", action="store_true", help="also run grade-one on each file (slow)")
    parser.add_argument("--only", default="", help="comma-separated names of the files besides the control")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply the four files' sizes (default 1)")
    parser.add_argument("--smoke", action="store_true", help=f"the smallest size: --scale {SMOKE_SCALE}, intake only")
    args = parser.parse_args(argv)
    if args.smoke:
        args.scale, args.grade_one = SMOKE_SCALE, False
    with tempfile.TemporaryDirectory(prefix="intake-memory-") as tmp:
        paths = files(Course(ROOT), Path(tmp), args.scale)
        names = ["control"] + [n for n in paths if n != "control" and (not args.only or n in args.only.split(","))]
        steps = [("intake", INTAKE)] + ([("grade-one", GRADE_ONE)] if args.grade_one else [])
        print(f"tree {args.tree}")
        for step, code in steps:
            base = None
            for name in names:
                found = measure(code, args.tree, paths[name], str(Path(tmp) / "result.json"))
                size = paths[name].stat().st_size
                total = found["self"] + found["child"]
                base = total if base is None else base
                print(f"{step:9s} {name:9s} {size / MB:6.1f} MB  self {found['self'] / MB:7.0f} MB  "
                      f"child {found['child'] / MB:5.0f} MB  extra/size {(total - base) / size:6.1f}x  "
                      f"{found['seconds']:6.1f} s  {found['outcome'][:90]}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
