"""The similarity check (autograder/similarity.py): copies are found, independent work is not paired.

The threshold's justification is the margin these tests print: the lowest score of a disguised copy and the
highest between independently written solutions (tests/similarity_corpus.py).
"""
import ast
import copy
import random

import nbformat
import pytest
import torch

from autograder import similarity
from autograder.course import Course
from tests.similarity_corpus import FUNCTIONS

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
    import csv

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
