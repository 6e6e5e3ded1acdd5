import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Reference outputs and figures are produced on the CPU unless a test asks for CUDA explicitly.
os.environ.setdefault("MPLBACKEND", "Agg")

# Every test carries exactly one of these (see README, "For maintainers"):
#   unit       pure Python, no notebook executed, no server: `pytest -m unit` is the inner loop (seconds)
#   notebooks  executes notebooks (nbclient, nbval, stock nbgrader)
#   sandbox    grades through the isolated engine (zygote, namespaces, cgroups)
#   services   starts a server (PostgreSQL, Dask, a browser, JupyterLab) on 127.0.0.1
KINDS = ("unit", "notebooks", "sandbox", "services")


@pytest.hookimpl(tryfirst=True)  # before -m deselects, so every collected test is checked
def pytest_collection_modifyitems(config, items):
    wrong = []
    for item in items:
        kinds = sorted({m.name for m in item.iter_markers() if m.name in KINDS})
        if len(kinds) != 1:
            wrong.append(f"{item.nodeid}: {kinds or 'none'}")
    if wrong:
        raise pytest.UsageError("every test needs exactly one of the markers " + ", ".join(KINDS)
                                + ":\n  " + "\n  ".join(wrong))


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT
