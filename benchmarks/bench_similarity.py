"""How long the similarity check takes for a large class: ``python benchmarks/bench_similarity.py [N] [--smoke]``.

N learners (default 500) of chapter 1, each submitting a random mix of the independently written solutions of
tests/similarity_corpus.py, a tenth of them disguised copies of another learner. Prints the seconds for
normalising and fingerprinting, and for the comparison through the fingerprint index, and, as the baseline
measured in the same run, the seconds a naive all-pairs comparison of the same fingerprint sets takes.
With twelve variants per function, random mixes often coincide, so this class has far more genuinely
similar pairs than a real one: it is a worst case for the index (many shared fingerprints), not a model of
how many pairs a class reports. ``--smoke``: the smallest size, 20 learners (tests/test_benchmarks.py runs it).
"""
import argparse
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nbformat  # noqa: E402

from autograder import similarity  # noqa: E402
from autograder.course import Course  # noqa: E402
from tests.test_similarity import CELLS, CHAPTER, disguise, learner_notebook  # noqa: E402
from tests.similarity_corpus import FUNCTIONS  # noqa: E402


SMOKE_LEARNERS = 20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("n", type=int, nargs="?", default=500, help="learners (default 500)")
    parser.add_argument("--smoke", action="store_true", help=f"the smallest size: {SMOKE_LEARNERS} learners")
    args = parser.parse_args(argv)
    n = SMOKE_LEARNERS if args.smoke else args.n
    rng = random.Random(0)
    course = Course()
    release = nbformat.read(course.release_notebook(CHAPTER), as_version=4)
    reference = nbformat.read(course.source_notebook(CHAPTER), as_version=4)
    learners = []
    for i in range(n):
        if i and rng.random() < 0.1:
            _, base = learners[rng.randrange(len(learners))]
            src = {gid: disguise(s, rng) for gid, s in base.items()}
        else:
            src = {gid: "\n\n".join(rng.choice(FUNCTIONS[f]).strip() for f in funcs) for gid, funcs in CELLS.items()}
        learners.append((f"learner{i:04d}", src))
    notebooks = [(name, learner_notebook(release, src)) for name, src in learners]
    t0 = time.perf_counter()
    source, release = similarity.code_view(reference), similarity.code_view(release)
    subs = [similarity.Submission.of(name, nb, source, release).fingerprint() for name, nb in notebooks]
    t1 = time.perf_counter()
    starter = similarity.Submission.of("(release)", release, source, release, cap=None)
    ref = similarity.Submission.of("(reference)", source, source, release, cap=None)
    pairs, matches, _groups = similarity.compare(subs, starter, ref)
    t2 = time.perf_counter()
    naive = 0
    sets = [set(s.prints) for s in subs]
    for a in range(len(sets)):
        for b in range(a + 1, len(sets)):
            naive += bool(sets[a] & sets[b])
    t3 = time.perf_counter()
    print(f"{n} learners x {CHAPTER}: fingerprinting {t1 - t0:.2f} s, indexed comparison {t2 - t1:.2f} s "
          f"(total {t2 - t0:.2f} s); naive all-pairs comparison of the same sets {t3 - t2:.2f} s "
          f"(ratio naive/indexed {(t3 - t2) / max(t2 - t1, 1e-9):.1f}x); {len(pairs)} pairs reported")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
