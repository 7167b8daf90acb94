"""Files the browser downloads: a consistent copy of the run log, and records as CSV or Markdown."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from studio import report
from studio.engine import Studio


def database_copy(studio: Studio) -> str:
    """A consistent copy of the run log (SQLite backup API), safe to hand to a browser."""
    return str(studio.backup(Path(tempfile.mkdtemp(prefix="studio-export-")) / "runs.db"))


def csv_file(records: list[dict[str, Any]], name: str = "runs.csv") -> str:
    target = Path(tempfile.mkdtemp(prefix="studio-export-")) / name
    target.write_text(report.to_csv(records))
    return str(target)


def markdown_file(records: list[dict[str, Any]], name: str = "compare.md") -> str:
    return text_file(report.markdown(records), name)


def text_file(text: str, name: str) -> str:
    target = Path(tempfile.mkdtemp(prefix="studio-export-")) / name
    target.write_text(text + "\n")
    return str(target)
