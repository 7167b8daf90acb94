"""results.json, written again after every change: a run stopped by a time limit still returns what it
measured. Sections: environment, techniques, memory, ladder, compute-limit, targets (`floors` in results
written before the speed targets had that name: `targets_of` reads either)."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any

from studio import report

SECTIONS = ("environment", "techniques", "memory", "ladder", "compute-limit", "targets")
OLD_TARGETS = "floors"  # the targets' key in results written before they had their name
RESULTS = "results.json"
PEAK = "matmul"  # compute-limit's entries of the device's matmul peak: "matmul-<dtype>" ("matmul": fp16's)


def is_peak(role: str) -> bool:
    """Whether a compute-limit entry is a matmul peak rather than a model's."""
    return role == PEAK or role.startswith(PEAK + "-")


def _plain(value: Any) -> Any:
    """JSON-safe: non-finite floats become None, paths and other objects their text."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


class Results:
    """The benchmark's results as one JSON document under `out`.

    Args:
        out: the folder results.json is written to.
        header: what describes the run (dry run or not, the plan's numbers).
    """

    def __init__(self, out: Path, header: dict[str, Any]):
        self.path = out / RESULTS
        out.mkdir(parents=True, exist_ok=True)
        self.data: dict[str, Any] = {
            **header,
            "status": "running",
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            **{name: {} for name in SECTIONS},
            "targets": [],
            "notes": [],
        }
        self.save()

    def put(self, section: str, key: str, value: Any) -> None:
        """Set `section[key]` and write the file."""
        self.data[section][key] = value
        self.save()

    def set(self, section: str, value: Any) -> None:
        """Replace a whole section and write the file."""
        self.data[section] = value
        self.save()

    def note(self, sentence: str) -> None:
        """A sentence for the reader (what was skipped and why)."""
        self.data["notes"].append(sentence)
        self.save()

    def finish(self, status: str) -> None:
        self.data["status"] = status
        self.data["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
        self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(_plain(self.data), indent=2))
        os.replace(tmp, self.path)


def targets_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The judged targets of a results document, new or from before the targets had their name."""
    return data.get("targets") or data.get(OLD_TARGETS) or []


def load(out: Path) -> dict[str, Any]:
    """results.json of a run (finished or not)."""
    return json.loads((out / RESULTS).read_text())


def not_run(config: str, why: str, status: str = "skipped", **extra: Any) -> dict[str, Any]:
    """A configuration that was not measured, in the shared vocabulary, with why."""
    return {**report.failed_record(config, why, status), **extra}
