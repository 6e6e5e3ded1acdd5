"""Course tooling: release generation, submissions for tests and benchmarks, and grading."""
