"""Every chapter has the anatomy of the course spec, read from its source notebook: a schematic (an SVG that
exists, with alt text), an exercise intro with "Done means" and a folded two-level hint before every solution
cell, then a summary, three to five questions to think about with their answers folded, and further reading. A reader notices each
of these when it is missing; the book test (tests/test_book.py) checks how they render."""
from __future__ import annotations

import ast
import re
import textwrap

import nbformat
import pytest

from attention_course.cells import grade_id, is_solution
from autograder.course import Course

pytestmark = pytest.mark.unit

COURSE = Course()
CHAPTERS = COURSE.chapters()
IMAGE = re.compile(r"!\[([^\]]*)\]\(([^)\s]+)\)")


def _markdown(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "markdown")


def _source(chapter):
    return nbformat.read(COURSE.source_notebook(chapter), as_version=4)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_opens_with_a_schematic(chapter):
    path = COURSE.source_notebook(chapter)
    diagrams = [(alt, src) for alt, src in IMAGE.findall(_markdown(_source(chapter))) if "assets/diagrams/" in src]
    assert diagrams, f"{chapter}: no schematic from assets/diagrams/"
    for alt, src in diagrams:
        assert len(alt.split()) >= 3, f"{chapter}: {src} needs alt text that says what it shows"
        target = (path.parent / src).resolve()
        assert target.is_file(), f"{chapter}: {src} does not exist"
        svg = target.read_text()
        assert "<title>" in svg, f"{src}: an SVG title, for screen readers"
        assert "http://" not in svg.replace("http://www.w3.org/", "") and "https://" not in svg, (
            f"{src}: loads something from the network")


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_says_when_it_is_done_and_has_a_two_level_hint(chapter):
    nb = _source(chapter)
    problems = []
    for i, cell in enumerate(nb.cells):
        if not is_solution(cell):
            continue
        intro = next((c.source for c in reversed(nb.cells[:i]) if c.cell_type == "markdown"), "")
        if "Done means" not in intro:
            problems.append(f"{grade_id(cell)}: no 'Done means' line before it")
        if intro.count("<details") < 2:
            problems.append(f"{grade_id(cell)}: needs a folded two-level hint (two <details> blocks)")
    assert not problems, f"{chapter}:\n  " + "\n  ".join(problems)


HINT = re.compile(r"<details>\s*<summary>(.*?)</summary>(.*?)</details>", re.S)
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|\*\*|//|==|!=|<=|>=|->|[^\sA-Za-z0-9_]")
# A hint quoting this many consecutive tokens of the reference solution hands over a whole statement of it
# (``scores = dot_score(queries, keys) / math.sqrt(queries.shape[-1])`` is 18); shorter runs are API names
# and shapes, which a hint may name.
LONGEST_QUOTE = 12
# ... and a hint whose quoted runs of 6 or more tokens add up to this share of the solution writes it.
MOST_OF_IT = 0.25


def _exercises(chapter):
    """(grade id, the markdown just before the solution cell, the solution's code) for every exercise."""
    nb = _source(chapter)
    for i, cell in enumerate(nb.cells):
        if is_solution(cell):
            intro = next((c.source for c in reversed(nb.cells[:i]) if c.cell_type == "markdown"), "")
            yield grade_id(cell), intro, cell.source


def _solution_tokens(source: str) -> list[str]:
    body = re.search(r"### BEGIN SOLUTION(.*?)### END SOLUTION", source, re.S)
    code = re.sub(r"#.*", "", body.group(1) if body else source)  # comments are not the solution
    return TOKEN.findall(code)


def _code_spans(markdown: str) -> list[str]:
    fenced = re.findall(r"```[^\n]*\n(.*?)```", markdown, re.S)
    return fenced + re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", markdown, flags=re.S))


def _longest_common_run(a: list[str], b: list[str]) -> int:
    best, previous = 0, [0] * (len(b) + 1)
    for x in a:
        current = [0] * (len(b) + 1)
        for j, y in enumerate(b):
            if x == y:
                current[j + 1] = previous[j] + 1
                best = max(best, current[j + 1])
        previous = current
    return best


def quoted_solution(hint: str, solution_source: str) -> tuple[int, float]:
    """The longest run of solution tokens a hint's code quotes, and the share of the solution its runs of six
    or more tokens cover."""
    solution = _solution_tokens(solution_source)
    runs = [_longest_common_run(TOKEN.findall(span), solution) for span in _code_spans(hint)]
    return max(runs, default=0), sum(r for r in runs if r >= 6) / max(len(solution), 1)


def test_the_giveaway_heuristic_flags_a_quoted_solution_and_passes_a_pointer():
    solution = ("def f(q, k, v):\n    ### BEGIN SOLUTION\n    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])\n"
                "    return torch.softmax(scores, dim=-1) @ v\n    ### END SOLUTION\n")
    longest, share = quoted_solution("`scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])`, then softmax",
                                     solution)
    assert longest >= LONGEST_QUOTE and share >= MOST_OF_IT
    longest, share = quoted_solution("Scale the scores by the square root of the key size before the softmax "
                                     "over the keys (`dim=-1`).", solution)
    assert longest < LONGEST_QUOTE and share < MOST_OF_IT


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_exercise_has_an_idea_hint_and_a_step_hint_that_is_not_the_solution(chapter):
    """Exactly two folded hints before each exercise: "Hint 1 (the idea)" and "Hint 2 ..." (the step).
    Neither is the solution: hint 2 points at the step and must not quote the reference's statements."""
    problems = []
    for gid, intro, solution in _exercises(chapter):
        hints = HINT.findall(intro)
        titles = [title.strip() for title, _ in hints]
        if len(hints) != 2 or not titles[0].startswith("Hint 1 (the idea)") or not titles[1].startswith("Hint 2"):
            problems.append(f"{gid}: want two folded hints 'Hint 1 (the idea)' and 'Hint 2 ...', found {titles}")
            continue
        for title, text in hints:
            longest, share = quoted_solution(text, solution)
            if longest >= LONGEST_QUOTE or share >= MOST_OF_IT:
                problems.append(f"{gid}: '{title}' quotes the solution ({longest} tokens in a row, "
                                f"{share:.0%} of it); point at the step instead")
    assert not problems, f"{chapter}:\n  " + "\n  ".join(problems)


# A hint that spells the solution in other words (issue 43): the token runs above miss a line written with other
# quotes or spacing, a line of a class's second solution region, and a call whose arguments are renamed or spread
# over several code spans. Code is compared as Python syntax trees (ast.unparse): whitespace, quotes, comments and
# redundant parentheses do not count.
SOLUTION_REGION = re.compile(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", re.S)
# Keywords that only place a tensor: a call written without them is still the reference's call.
INCIDENTAL = {"device", "dtype"}
# A step hint that names every input of a statement reading this many (`embed_dim * embed_dim + embed_dim`, `bias`)
# and says the operations in words has written that statement.
MIN_INPUTS = 4
# A quoted line must be this many words long (names, numbers, operators) to be more than an idiom (`x[t, i]`).
MIN_LINE_WORDS = 5
WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|[-+*/@%<>=!&|^~]+")


def _parse(code: str):
    """``code`` as a syntax tree, or None; a fragment that starts with a method (`.to(x.dtype)`) is read on a
    placeholder object, and an indented region inside an ``if``."""
    for text in (code, "_" + code.strip(), "if 1:\n" + textwrap.indent(code, "    ")):
        try:
            return ast.parse(textwrap.dedent(text) if text is code else text)
        except SyntaxError:
            continue
    return None


def solution_statements(source: str) -> list[ast.stmt]:
    """Every simple statement of every solution region (a class has one per method): what a hint must not spell."""
    regions = SOLUTION_REGION.findall(source) or [source]
    trees = [t for t in (_parse(r) for r in regions) if t is not None]
    kinds = (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Return, ast.Expr, ast.Raise)
    return [n for t in trees for n in ast.walk(t) if isinstance(n, kinds) and _value(n) is not None
            and not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]


def _value(statement: ast.stmt):
    return statement.exc if isinstance(statement, ast.Raise) else getattr(statement, "value", None)


def _hint_code(hint: str) -> list[ast.AST]:
    """The syntax trees of a hint's code: each inline span, each fenced block and each line of it."""
    fenced = re.findall(r"```[^\n]*\n(.*?)```", hint, re.S)
    inline = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", hint, flags=re.S))
    pieces = inline + fenced + [line for block in fenced for line in block.splitlines()]
    return [t for t in (_parse(p) for p in pieces if p.strip()) if t is not None]


def _hint_math(hint: str) -> list[ast.expr]:
    """The hint's inline formulas that read as Python arithmetic ($T_k - T_q$), as expressions."""
    found = []
    for formula in re.findall(r"(?<!\$)\$([^$\n]+)\$(?!\$)", hint):
        tree = _parse(re.sub(r"\\(?:times|cdot)", "*", formula))
        if tree and len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr) \
                and isinstance(tree.body[0].value, ast.BinOp):
            found.append(tree.body[0].value)
    return found


def _arithmetic_of_inputs(statement: ast.stmt, parameters: set[str]) -> list[ast.BinOp]:
    """The statement's arithmetic on the function's inputs alone, at least two of them (`num_keys - num_queries`)."""
    found = []
    for n in ast.walk(_value(statement)):
        if isinstance(n, ast.BinOp):
            leaves = [x for x in ast.walk(n) if not isinstance(x, (ast.BinOp, ast.operator, ast.expr_context))]
            names = {x.id for x in leaves if isinstance(x, ast.Name)}
            if all(isinstance(x, (ast.Name, ast.Constant)) for x in leaves) and len(names) >= 2 \
                    and names <= parameters:
                found.append(n)
    return found


def _callee(call: ast.Call) -> tuple[str, ...]:
    parts, f = [], call.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    parts.append(f.id if isinstance(f, ast.Name) else "")
    return tuple(reversed(parts))


def _arguments(call: ast.Call) -> tuple[list[ast.expr], dict[str, ast.expr]]:
    return list(call.args), {k.arg: k.value for k in call.keywords if k.arg not in INCIDENTAL}


def _renamed(node: ast.AST) -> str:
    """``node``'s structure with its variables numbered in order of appearance: `torch.arange(0, d, 2)` and
    `torch.arange(0, d_model, 2)` read the same."""
    names: dict[str, str] = {}
    tree = ast.parse(ast.unparse(node))
    for n in ast.walk(tree):
        if isinstance(n, ast.Name):
            n.id = names.setdefault(n.id, f"v{len(names)}")
    return ast.dump(tree)


def _same_argument_list(hint: ast.Call, solution: ast.Call) -> bool:
    """The hint's call has the solution call's callee and its argument list in other words: as many positional
    arguments, keywords the solution's own, at least two arguments, each equal up to the names of its variables."""
    (hp, hk), (sp, sk) = _arguments(hint), _arguments(solution)
    return (_callee(hint)[-1] == _callee(solution)[-1] and len(hp) == len(sp) and set(hk) <= set(sk)
            and len(hp) + len(hk) >= 2 and all(_renamed(a) == _renamed(b) for a, b in zip(hp, sp))
            and all(_renamed(hk[k]) == _renamed(sk[k]) for k in hk))


def _spread_call(hint_code: list[ast.AST], solution: ast.Call) -> bool:
    """The hint names the callee and writes each of its two or more arguments as a code span of its own
    (`mean` ... `dim=-1` ... `keepdim=True`)."""
    positional, keywords = _arguments(solution)
    wanted = [ast.unparse(a) for a in positional] + [f"{k}={ast.unparse(v)}" for k, v in keywords.items()]
    spans = {ast.unparse(t).replace(" ", "") for t in hint_code}
    names = {n.id for t in hint_code for n in ast.walk(t) if isinstance(n, ast.Name)} \
        | {n.attr for t in hint_code for n in ast.walk(t) if isinstance(n, ast.Attribute)}
    spans |= {ast.unparse(k).replace(" ", "") for t in hint_code for k in ast.walk(t) if isinstance(k, ast.keyword)}
    return len(wanted) >= 2 and _callee(solution)[-1] in names and all(w.replace(" ", "") in spans for w in wanted)


def _key_call_in_other_words(hint: ast.Call, solution: ast.Call) -> bool:
    """The step hint's call is the solution's call (the same dotted callee, as many positional arguments), with
    its arguments filled in, however they are named (`torch.arange(Tk)` for `torch.arange(scores.shape[-1])`)."""
    return (_callee(hint) == _callee(solution) and len(hint.args) == len(solution.args)
            and any(not isinstance(a, ast.Constant) for a in hint.args + [k.value for k in hint.keywords]))


def _inputs(statement: ast.stmt, parameters: set[str]) -> list[str]:
    """What a statement reads from outside the function, in order and with repeats: its parameters and the
    module's attributes (`self.eps` as `eps`)."""
    found = []
    for n in ast.walk(_value(statement)):
        if isinstance(n, ast.Name) and n.id in parameters - {"self"}:
            found.append(n.id)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            found.append(n.attr)
    return found


def _parameters(source: str) -> set[str]:
    tree = _parse(source)
    return {a.arg for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
            for a in n.args.posonlyargs + n.args.args + n.args.kwonlyargs} if tree else set()


def _named(hint_code: list[ast.AST]) -> set[str]:
    """The names a hint's code mentions as things to use: spans that are one expression, not a case to check
    (`step = warmup_steps - 1`, `T > self.max_len` state a value to try, not an operand)."""
    terms = [t.body[0].value for t in hint_code if len(t.body) == 1 and isinstance(t.body[0], ast.Expr)
             and not isinstance(t.body[0].value, ast.Compare)]
    return {n.id for t in terms for n in ast.walk(t) if isinstance(n, ast.Name)} \
        | {n.attr for t in terms for n in ast.walk(t) if isinstance(n, ast.Attribute)}


def spelled_statements(hint: str, solution_source: str, step: bool) -> list[str]:
    """The solution statements a hint spells: a whole line (or the expression it returns or assigns) quoted,
    or a call of it with its argument list in other words, renamed or spread over several spans; for a
    ``step`` hint also any call of the solution with its arguments filled in. Each as 'statement (how)'."""
    code = _hint_code(hint)
    written = {ast.unparse(n) for t in code for n in ast.walk(t) if isinstance(n, (ast.stmt, ast.expr))}
    written_renamed = {_renamed(n) for t in code for n in t.body if isinstance(n, (ast.Assign, ast.AugAssign))}
    calls = [n for t in code for n in ast.walk(t) if isinstance(n, ast.Call)]
    parameters, named = _parameters(solution_source), _named(code)
    formulas = {_renamed(f) for f in _hint_math(hint)}
    found = []
    for statement in solution_statements(solution_source):
        forms = [ast.unparse(statement), ast.unparse(_value(statement))]
        quoted = [f for f in forms if f in written and len(WORD.findall(f)) >= MIN_LINE_WORDS]
        renamed = isinstance(statement, (ast.Assign, ast.AugAssign)) and _renamed(statement) in written_renamed \
            and len(WORD.findall(forms[0])) >= MIN_LINE_WORDS
        inputs = _inputs(statement, parameters)
        formula = any(_renamed(a) in formulas for a in _arithmetic_of_inputs(statement, parameters))
        own = [n for n in ast.walk(statement) if isinstance(n, ast.Call) and (n.args or n.keywords)]
        how = ("quoted" if quoted else
               "quoted with other names" if renamed else
               "its arithmetic written as a formula" if step and formula else
               "every input it reads named, the operations in words" if step and len(inputs) >= MIN_INPUTS
               and set(inputs) <= named else
               "its call with the same arguments" if any(_same_argument_list(h, s) for h in calls for s in own) else
               "its call's arguments spelled one by one" if any(_spread_call(code, s) for s in own) else
               "its call with the arguments filled in" if step and any(_key_call_in_other_words(h, s)
                                                                       for h in calls for s in own) else None)
        if how:
            found.append(f"`{forms[0]}` ({how})")
    return found


def test_the_spelling_heuristic_sees_a_line_a_renamed_call_and_a_spread_call_and_passes_a_question():
    solution = ("class Norm:\n    def forward(self, x, width):\n        ### BEGIN SOLUTION\n"
                "        mean = x.mean(dim=-1, keepdim=True)  # (..., 1)\n"
                "        idx = torch.arange(0, width, 2, device=x.device)\n"
                "        return (x - mean) * self.weight[idx]\n        ### END SOLUTION\n")
    assert len(solution_statements(solution)) == 3, "the second solution region of a class counts"
    # the return line with other spacing and quotes, the arange call renamed, the mean call spread over spans
    assert spelled_statements("Return `(x-mean) * self.weight[idx]`.", solution, step=False) == [
        "`return (x - mean) * self.weight[idx]` (quoted)"]
    assert spelled_statements("Use `torch.arange(0, d, 2)`.", solution, step=False) == [
        "`idx = torch.arange(0, width, 2, device=x.device)` (its call with the same arguments)"]
    assert spelled_statements("Take the `mean` over `dim=-1` with `keepdim=True`.", solution, step=False) == [
        "`mean = x.mean(dim=-1, keepdim=True)` (its call's arguments spelled one by one)"]
    # a step hint may not fill in the arguments of a call of the solution, however it names them
    assert spelled_statements("Index with `torch.arange(0, D, k)`.", solution, step=True)
    assert not spelled_statements("Index with `torch.arange(0, D, k)`.", solution, step=False)
    # a formula dictated through its inputs: named one by one, or written in the text's symbols
    count = "def count(width, bias, start, stop):\n    n = width * width + (width if bias else 0)\n" \
            "    return torch.ones(n)[stop - start:]\n"
    assert spelled_statements("A matrix of `width` by `width`, plus one per output if `bias`.", count, step=True)
    assert spelled_statements("Keep the entries after $L - P$.", count, step=True)
    assert not spelled_statements("Check `width` = 3 by hand: `n = 12`?", count, step=True)
    # questions and checks name the API without its arguments
    assert not spelled_statements("Which axis does `mean` reduce? Print the shape of your result: is it "
                                  "`(2, 3, 1)`? `torch.arange` takes a step.", solution, step=True)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_no_hint_spells_a_line_of_its_solution(chapter):
    """Hint 2 (the step) spells no statement of the solution: no line quoted (up to spacing, quotes and comments)
    and no call of it with its arguments, however renamed or spread over the text. Hint 1 (the idea) may show the
    one call its idea rests on, but not a quarter of the solution."""
    problems = []
    for gid, intro, solution in _exercises(chapter):
        hints = HINT.findall(intro)
        statements = len(solution_statements(solution))
        for level, (title, text) in enumerate(hints[:2], 1):
            spelled = spelled_statements(text, solution, step=level == 2)
            if spelled and (level == 2 or len(spelled) >= MOST_OF_IT * statements):
                problems.append(f"{gid}: '{title.strip()}' spells {len(spelled)} of the solution's {statements} "
                                f"statements: {'; '.join(spelled)}; ask a question or name a check instead")
    assert not problems, f"{chapter}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_chapter_closes_with_summary_questions_and_reading(chapter):
    text = _markdown(_source(chapter))
    for heading in ("Summary", "Questions to think about", "Further reading"):
        assert re.search(rf"^#+ .*{heading}", text, re.MULTILINE | re.IGNORECASE), f"{chapter}: no '{heading}' section"
    questions = re.split(r"^#+ .*Questions to think about.*$", text, flags=re.MULTILINE | re.IGNORECASE)[1]
    questions = re.split(r"^#+ ", questions, maxsplit=1, flags=re.MULTILINE)[0]
    folded = questions.find("<details")
    assert folded > 0, f"{chapter}: the answers to the questions are folded away (<details>)"
    asked = len(re.findall(r"^\s*(?:\d+\.|[-*]) ", questions[:folded], re.MULTILINE))
    if asked == 0:  # one question per fold
        asked = questions.count("<details")
    assert 3 <= asked <= 5, f"{chapter}: three to five questions to think about (found {asked})"
