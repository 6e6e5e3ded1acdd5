"""Sum the per-worker files of `pytest --cpu-report=FILE` (tests/conftest.py) into one table, longest first:
CPU seconds per test file (the worker and the processes it waited for) and its wall seconds.

    python scripts/cpu_report.py FILE
"""
import json
import sys
from pathlib import Path


def main(target: str) -> None:
    totals: dict[str, list[float]] = {}
    for part in sorted(Path(target).parent.glob(Path(target).name + ".*")):
        for name, (cpu, wall) in json.loads(part.read_text()).items():
            t = totals.setdefault(name, [0.0, 0.0])
            t[0] += cpu
            t[1] += wall
    print(f"{'file':34} {'cpu s':>8} {'wall s':>8}")
    for name, (cpu, wall) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        print(f"{name:34} {cpu:8.0f} {wall:8.0f}")
    print(f"{'total':34} {sum(t[0] for t in totals.values()):8.0f} {sum(t[1] for t in totals.values()):8.0f}")


if __name__ == "__main__":
    main(sys.argv[1])
