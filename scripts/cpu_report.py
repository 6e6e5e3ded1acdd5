"""Sum the per-worker files of `pytest --cpu-report=FILE` (tests/conftest.py) into one table, longest first:
CPU seconds per test file (the worker and the processes it waited for) and its wall seconds; then the whole
machine over the run (from the first worker's start to the last one's finish): its busy and idle core-seconds.
Idle core-seconds are what more workers, or less waiting, could still use; where there are few, the suite is
CPU-bound and only less work shortens it.

    python scripts/cpu_report.py FILE
"""
import json
import sys
from pathlib import Path

MACHINE = "__machine__"  # the conftest's key for the machine's counters; every other key is a test file


def machine_line(parts: list[dict]) -> str | None:
    """The machine's busy and idle core-seconds between the earliest worker start and the latest finish."""
    spans = [p[MACHINE] for p in parts if "start" in p.get(MACHINE, {}) and "finish" in p.get(MACHINE, {})]
    if not spans:
        return None
    start = min((s["start"] for s in spans), key=lambda v: v[0])
    finish = max((s["finish"] for s in spans), key=lambda v: v[0])
    wall, busy, idle = finish[0] - start[0], finish[1] - start[1], finish[2] - start[2]
    cores = round((busy + idle) / max(wall, 1e-9))  # the run's machine, which need not be the one reading the report
    return (f"machine over the run: {wall:.0f} s wall on {cores} cores: {busy:.0f} core-s busy, {idle:.0f} idle "
            f"({100 * idle / max(busy + idle, 1e-9):.0f}% idle; everything running counts, the suite's servers "
            "and any neighbour too)")


def main(target: str) -> None:
    parts = [json.loads(p.read_text()) for p in sorted(Path(target).parent.glob(Path(target).name + ".*"))]
    totals: dict[str, list[float]] = {}
    for part in parts:
        for name, spent in part.items():
            if name == MACHINE:
                continue
            t = totals.setdefault(name, [0.0, 0.0])
            t[0] += spent[0]
            t[1] += spent[1]
    print(f"{'file':34} {'cpu s':>8} {'wall s':>8}")
    for name, (cpu, wall) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        print(f"{name:34} {cpu:8.0f} {wall:8.0f}")
    print(f"{'total':34} {sum(t[0] for t in totals.values()):8.0f} {sum(t[1] for t in totals.values()):8.0f}")
    line = machine_line(parts)
    if line:
        print(line)


if __name__ == "__main__":
    main(sys.argv[1])
