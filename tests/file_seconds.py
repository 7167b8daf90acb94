"""Refresh tests/file_seconds.json, the long test files' seconds that order the suite's files longest first
(tests/conftest.py), from a full run's durations:

    make test PYTEST_ARGS=--durations=150 | tee /tmp/suite.log
    .venv/bin/python -m tests.file_seconds < /tmp/suite.log
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

PATH = Path(__file__).with_name("file_seconds.json")
LINE = re.compile(r"^([0-9.]+)s (?:setup|call|teardown) +(tests/[^:]+\.py)::")
LONG_S = 8  # a file under this many seconds is costed by its markers


def file_seconds(lines) -> dict[str, int]:
    """Each file's summed durations, the long ones only, longest first."""
    total: Counter[str] = Counter()
    for line in lines:
        if match := LINE.match(line):
            total[match[2]] += float(match[1])
    return {name: round(seconds) for name, seconds in total.most_common() if seconds >= LONG_S}


if __name__ == "__main__":
    found = file_seconds(sys.stdin)
    if not found:
        raise SystemExit("no durations on stdin: run the suite with --durations=150")
    PATH.write_text(json.dumps(found, indent=1) + "\n")
    print(f"{len(found)} files, {sum(found.values())} s in all -> {PATH}")
