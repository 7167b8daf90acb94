"""The results of several runs (separate commands, e.g. `--models sd15 --sections ladder` and `--models sdxl`)
as one results.json and results.md, the targets judged again on everything they measured.

    python -m benchmarks.gpu.merge MERGED_DIR RUN_DIR [RUN_DIR ...]

A later run's section of a model replaces an earlier one's; images stay in each run's images.png.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.gpu.report import markdown
from benchmarks.gpu.results import OLD_TARGETS, RESULTS, load
from benchmarks.gpu.targets import judged

PER_MODEL = ("techniques", "memory", "ladder", "compute-limit")


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One results document from several; refuses runs on different devices."""
    devices = {run["device"] for run in runs}
    if len(devices) != 1:
        raise SystemExit(
            f"these runs were on different devices ({', '.join(sorted(devices))}); merge one at a time"
        )
    merged = {**runs[0], **{section: {} for section in PER_MODEL}, "notes": []}
    for i, run in enumerate(runs, 1):
        for section in PER_MODEL:
            merged[section].update(run.get(section) or {})
        merged["notes"] += [f"run {i}: {note}" for note in run.get("notes") or []]
    merged["status"] = "; ".join(f"run {i} {run.get('status')}" for i, run in enumerate(runs, 1))
    merged["started"], merged["finished"] = runs[0].get("started"), runs[-1].get("finished")
    merged.pop(OLD_TARGETS, None)  # a run from before the targets had their name
    merged["targets"] = judged(merged)
    return merged


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        raise SystemExit(__doc__)
    out, runs = Path(argv[0]), [load(Path(d)) for d in argv[1:]]
    merged = merge(runs)
    out.mkdir(parents=True, exist_ok=True)
    (out / RESULTS).write_text(json.dumps(merged, indent=2))
    (out / "results.md").write_text(markdown(merged))
    print(f"merged {len(runs)} runs into {out / RESULTS} and {out / 'results.md'}")


if __name__ == "__main__":
    main(sys.argv[1:])
