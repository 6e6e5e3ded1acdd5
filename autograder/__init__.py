"""Course tooling: release generation, submissions for tests and benchmarks, and grading."""
import sys

# Start-up cost. jsonschema (which nbformat imports) compiles the Lark grammars of rfc3987-syntax, when that
# package is installed, only to check the "iri" string format, which no notebook schema uses: 0.7 s of
# CPU in every process that reads a notebook (the grading command, each worker, the sandbox zygote). Without
# the module, jsonschema leaves that one format unchecked. Processes that do not import autograder (Jupyter,
# stock nbgrader) are unaffected; requirements.txt keeps jsonschema below 4.25, which does not use the package,
# so in the course's own install no process pays it and this line matters where a newer jsonschema is installed.
sys.modules.setdefault("rfc3987_syntax", None)
