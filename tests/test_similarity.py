"""The similarity check (autograder/similarity.py): copies are found, independent work is not paired.

The threshold's justification is the margin these tests print: the lowest score of a disguised copy and the
highest between independently written solutions (tests/similarity_corpus.py).

The check reads learner files on the trusted side (issue 41, classes 1, 5 and 6), so it is also tested as
hostile input: its scanner is linear in time and small in memory on the inputs that made the old tokenizer and
its fallback quadratic; the stage runs in a child within budgets (autograder/similarity_stage.py) and a check
past them is a line in similarity.csv, the class report and the output, never a stalled ``grade``; and it reads
all the code grading runs from a learner, the learner's own cells included. These are class-level cases (they
need a class to compare), so they live here and not in tests/hostile, whose corpus grades one notebook at a
time through the engine and never runs the similarity check.
"""
import ast
import copy
import csv
import json
import random
import subprocess
import sys
import textwrap

import nbformat
import pytest
import torch

from autograder import similarity, similarity_stage
from autograder.course import Course
from tests.similarity_corpus import FUNCTIONS, HOSTILE, ordinary_code

CHAPTER = "01_cognitive_attention"
CELLS = {"softmax": ["softmax"], "attention_pooling": ["attention_pooling"],
         "cue_weights": ["saliency_weights", "query_weights"]}


@pytest.fixture(scope="module")
def release():
    return nbformat.read(Course().release_notebook(CHAPTER), as_version=4)


@pytest.fixture(scope="module")
def reference():
    return nbformat.read(Course().source_notebook(CHAPTER), as_version=4)


def learner_notebook(release_nb, sources: dict[str, str]):
    """The release with its solution cells replaced by ``sources`` (by grade_id)."""
    nb = copy.deepcopy(release_nb)
    for cell in nb.cells:
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in sources:
            cell.source = sources[gid]
    return nb


def independent(i: int) -> dict[str, str]:
    return {gid: "\n\n".join(FUNCTIONS[f][i].strip() for f in funcs) for gid, funcs in CELLS.items()}


@pytest.mark.unit
def test_every_independent_solution_is_correct():
    """The corpus is what it claims: every variant computes what chapter 1 asks (else 'independent correct
    solutions' would prove nothing)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, generator=g, dtype=torch.float64) * 30
    w = torch.softmax(torch.randn(2, 4, 5, generator=g, dtype=torch.float64), -1)
    v = torch.randn(2, 5, 3, generator=g, dtype=torch.float64)
    items = torch.randn(2, 6, 3, generator=g, dtype=torch.float64)
    q = torch.randn(2, 4, 3, generator=g, dtype=torch.float64)
    for i in range(12):
        ns = {"torch": torch}
        for gid, src in independent(i).items():
            exec(compile(src, f"<learner {i} {gid}>", "exec"), ns)
        for dim in (-1, 0, 1):
            assert torch.allclose(ns["softmax"](x, dim=dim), torch.softmax(x, dim=dim)), (i, dim)
        assert torch.allclose(ns["attention_pooling"](w, v), w @ v), i
        centred = items - items.mean(-2, keepdim=True)
        assert torch.allclose(ns["saliency_weights"](items, 0.5),
                              torch.softmax(centred.norm(dim=-1) / 0.5, -1)), i
        assert torch.allclose(ns["query_weights"](q, items, 2.0),
                              torch.softmax(q @ items.transpose(-2, -1) / 2.0, -1)), i


class _Rename(ast.NodeTransformer):
    """A copier's disguise: every local variable and argument gets another name (function names stay: the
    tests call them by name)."""

    def __init__(self, rng):
        self.rng, self.names = rng, {}

    def _new(self, name):
        if name not in self.names:
            self.names[name] = f"{self.rng.choice(['tmp', 'val', 'my', 'the', 'res'])}_{len(self.names)}"
        return self.names[name]

    def visit_arg(self, node):
        node.arg = self._new(node.arg)
        return node

    def visit_Name(self, node):
        if node.id not in ("torch", "softmax", "range", "float", "ValueError", "TypeError", "len"):
            node.id = self._new(node.id)
        return node

    def visit_keyword(self, node):
        self.generic_visit(node)
        return node


def disguise(source: str, rng: random.Random) -> str:
    """Renamed variables, functions in another order, new comments and inserted no-op lines."""
    tree = ast.parse(source)
    tree = _Rename(rng).visit(tree)
    rng.shuffle(tree.body)  # reorder the functions of a cell
    for fn in tree.body:
        if isinstance(fn, ast.FunctionDef):
            at = rng.randrange(len(fn.body) + 1)
            fn.body.insert(at, ast.parse("pass").body[0])
            fn.body.insert(0, ast.parse("_unused = None").body[0])
    out = []
    for line in ast.unparse(tree).splitlines():
        out.append(line)
        if line.strip().startswith(("def ", "return")) and rng.random() < 0.7:
            out.append(" " * (len(line) - len(line.lstrip()) + 4 * line.strip().startswith("def "))
                       + f"# {rng.choice(['my own idea', 'step', 'TODO tidy', 'works'])}")
    return "\n".join(out)


def scores_between(release_nb, reference_nb, learners: dict[str, dict[str, str]]):
    nbs = [(name, learner_notebook(release_nb, src)) for name, src in learners.items()]
    result = similarity.check_chapter(CHAPTER, nbs, release_nb, reference_nb, threshold=0.0)
    return {frozenset((p.a.student, p.b.student)): p.score for p in result.pairs}, result


@pytest.mark.unit
def test_independent_solutions_are_not_paired_and_copies_are(release, reference, capsys):
    rng = random.Random(7)
    learners = {f"independent{i:02d}": independent(i) for i in range(12)}
    for i in range(0, 12, 2):  # six copiers, each disguising a different learner's work
        learners[f"copier{i:02d}"] = {gid: disguise(src, rng) for gid, src in independent(i).items()}
    scores, _ = scores_between(release, reference, learners)
    honest = [s for pair, s in scores.items() if not any(n.startswith("copier") for n in pair)]
    copies = [scores.get(frozenset((f"independent{i:02d}", f"copier{i:02d}")), 0.0) for i in range(0, 12, 2)]
    highest_independent, lowest_copy = max(honest, default=0.0), min(copies)
    with capsys.disabled():
        print(f"\nsimilarity: highest between independent solutions {highest_independent:.2f}, "
              f"lowest copy {lowest_copy:.2f}, threshold {similarity.THRESHOLD:.2f}")
    assert highest_independent < similarity.THRESHOLD, "two independently written solutions were paired"
    assert lowest_copy >= similarity.THRESHOLD, "a disguised copy was not found"
    # With the default threshold, exactly the six copier pairs are reported.
    nbs = [(name, learner_notebook(release, src)) for name, src in learners.items()]
    found = similarity.check_chapter(CHAPTER, nbs, release, reference)
    assert {frozenset((p.a.student, p.b.student)) for p in found.pairs} == {
        frozenset((f"independent{i:02d}", f"copier{i:02d}")) for i in range(0, 12, 2)}


@pytest.mark.unit
def test_the_reference_is_reported_apart_and_blanks_are_not_paired(release, reference):
    ref_sources = {gid: "\n\n".join(c.source for c in reference.cells
                                    if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == gid)
                   for gid in CELLS}
    learners = [("ref_copy", learner_notebook(release, {g: disguise(s, random.Random(1)) for g, s in
                                                        ref_sources.items()})),
                ("ref_copy2", learner_notebook(release, ref_sources)),
                ("blank1", copy.deepcopy(release)), ("blank2", copy.deepcopy(release)),
                *((f"honest{i}", learner_notebook(release, independent(i))) for i in range(12))]
    result = similarity.check_chapter(CHAPTER, learners, release, reference)
    assert {p.a.student for p in result.reference} == {"ref_copy", "ref_copy2"}
    assert result.pairs == []  # two reference copiers are one finding each, not a pair; blanks share nothing


@pytest.mark.unit
def test_hostile_sources_and_names_are_data(release, reference):
    evil = '</pre><script>alert(1)</script>\n"""never closed\n\x00\tdef (:'
    learners = [("<img src=x onerror=alert(1)>", learner_notebook(release, {"softmax": evil + FUNCTIONS["softmax"][0]})),
                ("=HYPERLINK(1)", learner_notebook(release, {"softmax": evil + FUNCTIONS["softmax"][0]}))]
    result = similarity.check_chapter(CHAPTER, learners, release, reference, threshold=0.0)
    page = result.html()
    assert "<script>" not in page and "<img" not in page
    assert "&lt;script&gt;" in page or not result.pairs


@pytest.mark.unit
def test_fingerprints_survive_what_winnowing_promises():
    """Any shared run of W + K - 1 normalised tokens yields a shared fingerprint, wherever it sits."""
    rng = random.Random(3)
    words = [f"v{i} = v{i}.amax(dim={i}) + {i}" for i in range(40)]
    shared = "\n".join(words[10:20])
    a = "\n".join(rng.sample(words[:10], 10)) + "\n" + shared
    b = shared + "\n" + "\n".join(f"w{i} = torch.exp(w{i}) * {i}" for i in range(10))
    fa = similarity.fingerprints(similarity.normalise([a]))
    fb = similarity.fingerprints(similarity.normalise([b]))
    assert fa.keys() & fb.keys()


@pytest.mark.unit
def test_command_reads_the_submitted_layout_and_writes_the_csv(release, reference, tmp_path, capsys):
    """`python -m autograder similarity CHAPTER --course ROOT`: nbgrader's submitted/ layout in, the pairs out
    (printed and in grading/similarity.csv, formula-like ids neutralised); a symlinked notebook is skipped."""
    course = Course().copy_to(tmp_path / "course")
    submitted = course.grading / "submitted"
    work = {"=HYPERLINK(1)": independent(4), "copier": {g: disguise(s, random.Random(2))
                                                       for g, s in independent(4).items()},
            "honest": independent(5)}
    for student, sources in work.items():
        folder = submitted / student / CHAPTER
        folder.mkdir(parents=True)
        nbformat.write(learner_notebook(release, sources), folder / f"{CHAPTER}.ipynb")
    (submitted / "linker" / CHAPTER).mkdir(parents=True)
    (submitted / "linker" / CHAPTER / f"{CHAPTER}.ipynb").symlink_to(course.source_notebook(CHAPTER))
    from autograder.__main__ import main

    assert main(["similarity", CHAPTER, "--course", str(course.root)]) == 0
    printed = capsys.readouterr().out
    assert "1 similar pair(s), 0 matching the reference" in printed
    rows = list(csv.DictReader(open(course.grading / similarity.CSV_NAME, encoding="utf-8")))
    assert [(r["kind"], {r["student_a"], r["student_b"]}) for r in rows] == [
        ("pair", {"'=HYPERLINK(1)", "copier"})]


@pytest.mark.services
def test_class_report_shows_pairs_side_by_side_in_chromium(release, reference, tmp_path):
    """The class report's similarity section, opened in headless Chromium: the copied pair is listed with both
    submissions side by side and the shared lines marked; a learner's `<script>` in a cell or an id is text."""
    from autograder.report import render
    from tests.browser import Browser

    evil = {gid: src for gid, src in independent(7).items()}
    evil["softmax"] = evil["softmax"] + "\n# </pre><script>window.__pwned = 1</script>"
    learners = [("<img src=x onerror='window.__pwned=2'>", learner_notebook(release, evil)),
                ("copier", learner_notebook(release, {g: disguise(s, random.Random(4)) for g, s in evil.items()})),
                ("honest", learner_notebook(release, independent(2)))]
    result = similarity.check_chapter(CHAPTER, learners, release, reference)
    page_path = tmp_path / "class_report.html"
    page_path.write_text(render(Course(), [], None, [result]), encoding="utf-8")
    browser = Browser()
    try:
        page = browser.open(page_path.as_uri(), "document.readyState === 'complete'")
        page.evaluate("document.querySelectorAll('details').forEach(d => d.open = true)")
        sides = page.evaluate("Array.from(document.querySelectorAll('.sbs > div')).map(d => "
                              "[d.querySelector('h4').innerText, d.querySelectorAll('mark').length, "
                              "d.getBoundingClientRect().width])")
        summary = page.evaluate("document.querySelector('details summary').innerText")
        pwned = page.evaluate("window.__pwned === undefined ? null : window.__pwned")
        scripts = page.evaluate("document.querySelectorAll('script, img').length")
    finally:
        browser.close()
    assert pwned is None and scripts == 0
    assert [s[0] for s in sides] == ["<img src=x onerror='window.__pwned=2'>", "copier"] or \
        [s[0] for s in sides] == ["copier", "<img src=x onerror='window.__pwned=2'>"]
    assert all(marks >= 3 and width > 200 for _, marks, width in sides), sides  # two readable columns, marked
    assert "of the shorter submission shared" in summary


# -- the scanner: the same meaning, linear time, small memory ------------------------------------------------------
@pytest.mark.unit
def test_the_scanner_keeps_the_normalisation():
    """Names become V and literals L; keywords, attribute names and keyword-argument names stay; comments,
    docstrings and statements that do nothing are dropped (so inserting them changes nothing)."""
    plain = textwrap.dedent('''
        def softmax(x, dim=-1):
            m = x.amax(dim=dim, keepdim=True)
            return (x - m).exp() / 2.5
        ''')
    padded = textwrap.dedent('''
        def softmax(values, dim=-1):  # my own idea
            """Softmax."""
            _unused = None
            pass
            peak = values.amax(dim=dim,
                               keepdim=True)
            'a bare string'
            peak = peak
            return (values - peak).exp() / 2.5
        ''')
    expected = ("def V ( V , V = - L ) : V = V . amax ( dim = V , keepdim = True ) ; "
                "return ( V - V ) . exp ( ) / L ;").split()
    assert similarity.normalise([plain]).texts() == expected
    assert similarity.normalise([padded]).texts() == expected
    tokens = similarity.normalise(["a = 1\nprint(a)\n", "b = f(x)\n"])
    assert [tokens.where(i) for i in range(len(tokens))][:2] == [(0, 1), (0, 1)]
    assert tokens.where(len(tokens) - 1) == (1, 1)


SCAN_RATIO = 25  # a hostile cell may take at most this many times the CPU of ordinary code of the same size
SCAN_BYTES_PER_CHAR = 64  # and grow the address space by at most this much per character, at least 8 MiB
#                           (measured: 12 for 1 MB of `a,`, 1 MiB for 64 KB; the old scanner 690 and 13 MiB)
_SCAN_PROBE = textwrap.dedent("""
    import json, math, resource, sys, time
    from autograder.similarity import fingerprints, normalise
    from tests.similarity_corpus import HOSTILE, ordinary_code

    size, kind, ratio, per_char = int(sys.argv[1]), sys.argv[2], float(sys.argv[3]), int(sys.argv[4])
    ordinary, hostile = ordinary_code(size), HOSTILE[kind](size)
    t0 = time.process_time()
    fingerprints(normalise([ordinary]))
    base = time.process_time() - t0
    # The budget: `ratio` times the baseline just measured, at least a second (the kernel counts whole seconds);
    # past it the kernel stops this process, so a quadratic scanner fails here instead of running for hours.
    # Memory: the address space this process has now plus `per_char` bytes per character, at least 8 MiB (the
    # allocator takes address space in chunks of up to a few MiB, whatever the input).
    cpu = math.ceil(time.process_time() + max(1.0, ratio * base))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    with open("/proc/self/statm") as f:
        now = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (now + max(8 << 20, per_char * size),) * 2)
    t0 = time.process_time()
    tokens = normalise([hostile])
    found = fingerprints(tokens)
    took = time.process_time() - t0
    print(json.dumps({"base": base, "hostile": took, "tokens": len(tokens), "fingerprints": len(found)}))
""")


@pytest.mark.unit
@pytest.mark.parametrize("size", [64 * 1024, 1_000_000], ids=["64KB", "1MB"])
@pytest.mark.parametrize("kind", list(HOSTILE))
def test_hostile_cells_are_normalised_in_linear_time_and_small_memory(kind, size):
    """CPU time against ordinary code of the same size measured in the same process (never absolute seconds),
    under a CPU limit of SCAN_RATIO times that baseline and an address-space limit of SCAN_BYTES_PER_CHAR per
    character: the old scanner (Python's tokenizer, then a backtracking regex) took 50 s on the 64 KB string
    cells and hours on 1 MB, and 0.7 GB for 1 MB of ``a,``."""
    done = subprocess.run([sys.executable, "-c", _SCAN_PROBE, str(size), kind, str(SCAN_RATIO),
                           str(SCAN_BYTES_PER_CHAR)], cwd=Course().root,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, (f"stopped (rc {done.returncode}: -24 is the CPU limit, MemoryError the memory "
                                  f"limit): {done.stderr[-800:]}")
    seen = json.loads(done.stdout)
    assert seen["hostile"] <= SCAN_RATIO * max(seen["base"], 0.01), seen


@pytest.mark.unit
def test_every_character_is_scanned_once():
    """The scanner's matches tile the text: each character is consumed by exactly one match, in order, so the
    number of steps is at most the number of characters, whatever they are."""
    text = ordinary_code(4000) + HOSTILE["open string of escaped quotes"](2000) + "\n'''x\\'''' \x00\u2028$?`" \
        + HOSTILE["a, repeated"](200) + 'rb"\\\n"' + "(((" + "\r\n\\\n#"
    at = 0
    for m in similarity.TOKEN.finditer(text.replace("\r\n", "\n")):
        assert m.start() == at and m.end() > at
        at = m.end()
    assert at == len(text.replace("\r\n", "\n"))


# -- all the code grading runs is compared -------------------------------------------------------------------------
def moved_into_own_cells(release_nb, sources: dict[str, str]):
    """The release with its solution cells left as released (the stubs) and, after each, a cell of the learner's
    own (no nbgrader metadata) that defines the functions again: grading runs it, so it scores as the code."""
    nb = copy.deepcopy(release_nb)
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if gid in sources:
            cells.append(nbformat.v4.new_code_cell(sources[gid]))
    nb.cells = cells
    return nb


@pytest.mark.unit
def test_code_moved_into_the_learners_own_cells_is_compared(release, reference):
    """Plagiarism moved out of the solution cells is found: the copier's own cells run, so they are compared.
    The test cells grading restores from the course are not the learner's: two learners who write the same
    text into them (grading never runs it) are not paired."""
    learners = [(f"independent{i:02d}", learner_notebook(release, independent(i))) for i in range(10)]
    learners.append(("mover", moved_into_own_cells(
        release, {gid: disguise(src, random.Random(5)) for gid, src in independent(3).items()})))
    padding = "\n".join(f"w{i} = torch.exp(w{i}).amax(dim={i}) * {i}" for i in range(60))
    for name, variant in (("tester1", 10), ("tester2", 11)):
        nb = learner_notebook(release, independent(variant))
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            if meta.get("grade") and not meta.get("solution"):
                cell.source = padding
        learners.append((name, nb))
    result = similarity.check_chapter(CHAPTER, learners, release, reference)
    pairs = {frozenset((p.a.student, p.b.student)) for p in result.pairs}
    assert frozenset(("independent03", "mover")) in pairs, pairs
    assert frozenset(("tester1", "tester2")) not in pairs
    page = similarity.side_by_side(next(p for p in result.pairs if "mover" in (p.a.student, p.b.student)))
    assert "<mark>" in page and "(a code cell without grade_id)" in page  # the shared lines, shown where they are


# -- the stage: a budgeted child, its failure a line -----------------------------------------------------------
def _class(tmp_path, hostile: dict[str, str]):
    """A course copy whose chapter 1 holds four independent learners, a disguised copy of one of them, and
    ``hostile``: {student: code added at the end of the softmax cell}."""
    course = Course().copy_to(tmp_path / "course")
    release = nbformat.read(course.release_notebook(CHAPTER), as_version=4)
    work = {f"honest{i}": independent(i) for i in range(4)}
    work["copier"] = {g: disguise(s, random.Random(2)) for g, s in independent(1).items()}
    for student, tail in hostile.items():
        work[student] = dict(independent(6), softmax=independent(6)["softmax"] + "\n" + tail)
    for student, sources in work.items():
        folder = course.grading / "submitted" / student / CHAPTER
        folder.mkdir(parents=True)
        nbformat.write(learner_notebook(release, sources), folder / f"{CHAPTER}.ipynb")
    return course


ONE_MB_COMMAS = "a," * 500_000  # 1,000,000 characters: the intake's limit on one cell is 1 MiB


@pytest.mark.unit
def test_the_stage_runs_in_a_bounded_child_and_cuts_a_huge_cell(tmp_path):
    """The check runs in a child that set its own RLIMIT_AS, RLIMIT_CPU and RLIMIT_FSIZE to the class's budget
    before reading any learner file; a 1 MB cell of ``a,`` is read up to the cap and listed as cut (in the
    CSV, the report's section and the output), and the class is compared as usual."""
    course = _class(tmp_path, {"huge": ONE_MB_COMMAS})
    stage = similarity.run(course, [CHAPTER])
    assert stage.reason == ""
    budget = stage.budget
    assert budget == similarity_stage.Budget.for_class(6)
    assert stage.limits["as"] == [budget.memory_bytes] * 2
    assert stage.limits["cpu"] == [budget.cpu_s, budget.cpu_s + 1]
    assert stage.limits["fsize"] == [budget.result_bytes] * 2
    rows = list(csv.DictReader(open(course.grading / similarity.CSV_NAME, encoding="utf-8")))
    assert [(r["kind"], {r["student_a"], r["student_b"]}) for r in rows if r["kind"] == "pair"] == [
        ("pair", {"honest1", "copier"})]
    cut = [r for r in rows if r["kind"] == "cut"]
    assert [r["student_a"] for r in cut] == ["huge"]
    assert f"{similarity.TOKEN_CAP:,}" in cut[0]["note"]
    assert "huge (cut: compared its first" in stage.sections[0].html()
    assert "1 cut at" in stage.line()


@pytest.mark.unit
@pytest.mark.parametrize("budget, says", [
    (similarity_stage.Budget(cpu_s=1, memory_bytes=2 << 30, wall_s=1800), "stopped after its CPU budget of 1 s"),
    (similarity_stage.Budget(cpu_s=1800, memory_bytes=2 << 30, wall_s=1), "stopped after its wall-clock budget"),
    (similarity_stage.Budget(cpu_s=1800, memory_bytes=16 << 20, wall_s=1800),
     "needed more than its memory budget of 16 MiB"),
], ids=["cpu", "wall", "memory"])
def test_a_check_past_its_budget_is_a_line_not_a_stall(tmp_path, budget, says, capsys):
    """Twelve learners whose cells of ``a,`` (1 MB, read to the cap) need several CPU seconds of normalising:
    past a CPU budget of 1 s, a wall clock of 1 s (the CPU it needs is a lower bound of its wall time, so
    neither races a clock), or an address space smaller than the data it reads, the child is stopped and the
    stage ends with its reason, in the CSV, in the class report's section and in the command's output."""
    course = _class(tmp_path, {f"huge{i:02d}": ONE_MB_COMMAS for i in range(12)})
    stage = similarity.run(course, [CHAPTER], budget=budget)
    assert says in stage.reason and "no submissions were compared" in stage.reason
    rows = list(csv.DictReader(open(course.grading / similarity.CSV_NAME, encoding="utf-8")))
    assert [(r["kind"], r["note"]) for r in rows] == [("stopped", stage.reason)]
    assert "The check did not finish" in stage.sections[0].html() and says in stage.sections[0].html()
    assert stage.line().startswith("similarity: the check stopped") and says in stage.line()
    from autograder.report import render

    assert "The check did not finish" in render(course, [], None, stage.sections)


@pytest.mark.sandbox  # a `grade` run with the stub engine (tests/stub_engine.py): an integration test
@pytest.mark.timeout(600)
def test_grade_goes_on_when_the_check_stops(tmp_path, monkeypatch):
    """`grade` with the stage's memory budget below what its child needs to start: every notebook is graded, the
    run ends as usual, and the check's failure is a line of grade's output and of the class report."""
    from autograder.batch import grade
    from autograder.output_files import REPORT_NAME

    course = _class(tmp_path, {})
    monkeypatch.setenv("AUTOGRADER_ENGINE", "tests.stub_engine")
    monkeypatch.setattr(similarity_stage, "MEMORY_BASE_BYTES", 16 << 20)
    monkeypatch.setattr(similarity_stage, "MEMORY_PER_NOTEBOOK_BYTES", 0)
    lines: list[str] = []
    summary = grade(course, [CHAPTER], workers=1, progress=False, log=lines.append)
    assert summary.graded == 5 and not summary.failures, lines
    said = [line for line in lines if line.startswith("similarity: ")]
    assert len(said) == 1 and "the check stopped: it needed more than its memory budget of 16 MiB" in said[0], lines
    assert "The check did not finish" in (course.grading / "reports" / REPORT_NAME).read_text(encoding="utf-8")
    rows = list(csv.DictReader(open(course.grading / similarity.CSV_NAME, encoding="utf-8")))
    assert [r["kind"] for r in rows] == ["stopped"]


# -- issue 41's red team: copies hidden by padding, by exec, in a ring, behind harmless calls -------------------
def _pair_score(result, a: str, b: str) -> float:
    return next((p.score for p in result.pairs if {p.a.student, p.b.student} == {a, b}), 0.0)


def _honest_class(release, n: int) -> list:
    return [(f"independent{i:02d}", learner_notebook(release, independent(i))) for i in range(n)]


@pytest.mark.unit
def test_padding_cannot_push_copied_code_past_the_cap(release, reference):
    """280 K characters of comment lines in a first cell of the learner's own, then a copy: the cap counts
    normalised tokens, which comments, blank lines and docstrings do not make, so the copy is read and paired,
    and the submission is not listed as cut. Code past the cap is still cut, with a note naming it in tokens."""
    copy_nb = learner_notebook(release, independent(3))
    copy_nb.cells.insert(0, nbformat.v4.new_code_cell("# padding\n" * 28_000 + "\n\n" * 1000))
    result = similarity.check_chapter(CHAPTER, [*_honest_class(release, 6), ("padded", copy_nb)], release, reference)
    assert _pair_score(result, "independent03", "padded") >= similarity.THRESHOLD, result.pairs
    assert not result.notes
    generated = learner_notebook(release, independent(4))
    generated.cells.insert(0, nbformat.v4.new_code_cell("x = y + 1\n" * (similarity.TOKEN_CAP // 4)))
    result = similarity.check_chapter(CHAPTER, [*_honest_class(release, 3), ("generated", generated)], release,
                                      reference)
    assert [(n.student, n.kind) for n in result.notes] == [("generated", "cut")]
    assert f"{similarity.TOKEN_CAP:,} tokens" in result.notes[0].text


@pytest.mark.unit
def test_code_run_from_a_string_is_compared(release, reference):
    """Each solution cell of a copy becomes ``exec("<the copied code>")`` (escaped, or a raw triple-quoted
    string): a long literal is also read as code, so both pair with the original. The disguised-copy vs
    independent-solution margin is tested with the same scanner (test_independent_solutions_are_not_paired...)."""
    escaped = {gid: f"exec({src!r})" for gid, src in independent(3).items()}
    raw = {gid: f'exec(compile(r"""{src}""", "x", "exec"))' for gid, src in independent(5).items()}
    assert all("\n" not in s for s in escaped.values())  # one line of escapes: nothing but a literal
    learners = [*_honest_class(release, 8), ("exec_escaped", learner_notebook(release, escaped)),
                ("exec_raw", learner_notebook(release, raw))]
    result = similarity.check_chapter(CHAPTER, learners, release, reference)
    assert _pair_score(result, "independent03", "exec_escaped") >= similarity.THRESHOLD, result.pairs
    assert _pair_score(result, "independent05", "exec_raw") >= similarity.THRESHOLD, result.pairs
    assert similarity.string_code('"a = 1\\nb = f(a)\\x20"') == "a = 1\nb = f(a) "
    assert similarity.string_code("r'''a\\nb'''") == "a\\nb"


def _mixed(i: int) -> dict[str, str]:
    """A learner who is not in the ring: each function from another of the independent variants 1-11 (a
    variant is shared by a few learners, never by the ring, which copies variant 0)."""
    pick = {f: FUNCTIONS[f][1 + (i * (3 + k) + k) % 11].strip() for k, f in enumerate(FUNCTIONS)}
    return {gid: "\n\n".join(pick[f] for f in funcs) for gid, funcs in CELLS.items()}


@pytest.mark.unit
@pytest.mark.parametrize("disguised", [False, True], ids=["identical", "disguised"])
@pytest.mark.parametrize("ring", [9, 20])
def test_a_ring_of_copies_is_a_group_not_an_idiom(release, reference, ring, disguised):
    """``ring`` copies in a class of 40 hold every fingerprint of their code more often than the idiom share (8
    learners), so no pair of them is counted; they are reported as one group instead (a row in similarity.csv,
    a section of the report), and the learners outside the ring are in no group. Copies each disguised in
    their own way (renamed, reordered, no-op lines) still share most of the ring's code as one set."""
    copied = independent(0)
    learners = [(f"ring{i:02d}", learner_notebook(release, {g: disguise(s, random.Random(i)) for g, s in copied.items()}
                                                  if disguised else copied)) for i in range(ring)]
    learners += [(f"other{i:02d}", learner_notebook(release, _mixed(i))) for i in range(40 - ring)]
    result = similarity.check_chapter(CHAPTER, learners, release, reference)
    assert [sorted(m.student for m in g.members) for g in result.groups] == [[f"ring{i:02d}" for i in range(ring)]]
    row = [r for r in result.rows() if r["kind"] == "group"]
    assert len(row) == 1 and row[0]["note"].startswith(f"{ring} learners")
    assert float(row[0]["score"]) >= similarity.THRESHOLD
    assert "A group of" in result.html() and "ring00" in result.html()
    assert "group(s) of learners with the same code" in similarity.Stage(
        [result.section()], "", similarity_stage.Budget.for_class(40), None, similarity.CSV_NAME).line()


class _Interleave(ast.NodeTransformer):
    """The red team's filler: ``id(0)`` (or another harmless call) after every statement."""

    def __init__(self, filler: str):
        self.filler = filler

    def generic_visit(self, node):
        super().generic_visit(node)
        for name in ("body", "orelse", "finalbody"):
            stmts = getattr(node, name, None)
            if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                setattr(node, name, [x for s in stmts for x in (s, ast.parse(self.filler).body[0])])
        return node


@pytest.mark.unit
@pytest.mark.parametrize("filler", ["id(0)", "print(x, 'step', sep=None)", "math.floor(1)"])
def test_harmless_calls_between_statements_are_dropped(release, reference, filler):
    """A copy with a call whose arguments are literals or names after every statement normalises as the
    copy without it: such a statement is dropped like the other no-ops; calls that do work are kept."""
    spread = {gid: ast.unparse(ast.fix_missing_locations(_Interleave(filler).visit(ast.parse(src))))
              for gid, src in independent(3).items()}
    result = similarity.check_chapter(CHAPTER, [*_honest_class(release, 8), ("spread", learner_notebook(
        release, spread))], release, reference)
    assert _pair_score(result, "independent03", "spread") >= 0.9, result.pairs
    texts = similarity.normalise(["id(0)\ny = f(x)\nf(g(x))\nf(x).g()\nf(x) + 1\nf(x)[0] = 1\nf(-1)"]).texts()
    assert texts.count(";") == 6, texts
