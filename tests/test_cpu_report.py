"""The suite's own measuring tool (scripts/cpu_report.py, fed by tests/conftest.py's ``--cpu-report``): what it says
about a run is what decides where the suite's time can still be saved."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def report(tmp_path: Path, parts: dict[str, dict]) -> str:
    for worker, data in parts.items():
        (tmp_path / f"cpu.txt.{worker}").write_text(json.dumps(data))
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "cpu_report.py"), str(tmp_path / "cpu.txt")],
                          capture_output=True, text=True, check=True)
    return done.stdout


@pytest.mark.unit
def test_files_are_summed_over_workers_and_the_machine_spans_the_whole_run(tmp_path):
    out = report(tmp_path, {
        "gw0": {"test_a.py": [10.0, 12.0], "test_b.py": [1.0, 1.5],
                "__machine__": {"start": [100.0, 1000.0, 50.0], "finish": [400.0, 1500.0, 70.0]}},
        "gw1": {"test_a.py": [5.0, 6.0],
                "__machine__": {"start": [101.0, 1001.0, 50.0], "finish": [410.0, 1580.0, 90.0]}},
    })
    lines = out.splitlines()
    assert lines[1].split() == ["test_a.py", "15", "18"] and lines[2].split() == ["test_b.py", "1", "2"]
    assert lines[3].split() == ["total", "16", "20"]
    # from the first start (t=100) to the last finish (t=410): 580 busy and 40 idle core-seconds
    assert lines[4].startswith("machine over the run: 310 s wall on ")
    assert "580 core-s busy, 40 idle (6% idle" in lines[4]


@pytest.mark.unit
def test_a_report_from_before_the_machine_counters_still_reads(tmp_path):
    out = report(tmp_path, {"gw0": {"test_a.py": [3.0, 4.0]}})
    assert out.splitlines()[-1].split() == ["total", "3", "4"]


@pytest.mark.unit
def test_the_suite_writes_the_machine_counters(tmp_path):
    """A real, tiny run with --cpu-report: its file names the test file and carries the machine's counters."""
    target = tmp_path / "cpu.txt"
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/test_points_lint.py", "-q", "-p", "no:cacheprovider",
                           "-p", "no:xdist", f"--cpu-report={target}"], cwd=ROOT, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")})  # not a worker's
    assert done.returncode == 0, done.stdout[-2000:]
    data = json.loads(Path(f"{target}.main").read_text())
    assert "test_points_lint.py" in data
    machine = data["__machine__"]
    assert machine["finish"][0] >= machine["start"][0] and machine["finish"][1] >= machine["start"][1]
