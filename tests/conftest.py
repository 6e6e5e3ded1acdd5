import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Reference outputs and figures are produced on the CPU unless a test asks for CUDA explicitly.
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return ROOT
