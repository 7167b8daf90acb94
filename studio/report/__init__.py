"""One vocabulary for every face: a measured run -> a record with the same keys and units everywhere,
and records -> Markdown and CSV tables.

`/generate`, `/compare`, `/ladder`, `/autotune`, `/history`, the CLI's `--json`, the CSV and Markdown exports
and the run log's export all speak in `KEYS`; `docs/api.md` lists them with their units.

- `studio.report.vocabulary`: `KEYS`, the keys with their units and meanings;
- `studio.report.records`: runs, failures and run-log rows as records;
- `studio.report.text`: records as words, Markdown and CSV;
- `studio.report.notes`: sentences that explain a sweep's table (what Latency and Speedup are, rows where the
  two disagree);
- `studio.report.machine_text`: this machine in words.
"""

from studio.report.machine_text import machine_rows
from studio.report.notes import disagreements, figures_legend, point_name, speedup_title
from studio.report.records import (
    MEMORY_RESOLUTION_MB,
    failed_record,
    log_record,
    pays_off_after,
    run_record,
    single_record,
)
from studio.report.text import (
    TABLE,
    breakable,
    caption,
    emit,
    first_call,
    host_note,
    lora_tags,
    markdown,
    memory,
    prompt_score,
    prompt_score_note,
    quality,
    ratio,
    readable_rows,
    run_memory,
    seconds,
    steps_reused_note,
    table_notes,
    to_csv,
)
from studio.report.vocabulary import KEYS, docs_table

__all__ = [
    "KEYS",
    "MEMORY_RESOLUTION_MB",
    "TABLE",
    "breakable",
    "caption",
    "disagreements",
    "docs_table",
    "emit",
    "first_call",
    "failed_record",
    "figures_legend",
    "host_note",
    "lora_tags",
    "log_record",
    "machine_rows",
    "markdown",
    "memory",
    "pays_off_after",
    "point_name",
    "prompt_score",
    "prompt_score_note",
    "steps_reused_note",
    "table_notes",
    "quality",
    "ratio",
    "readable_rows",
    "run_memory",
    "run_record",
    "seconds",
    "single_record",
    "speedup_title",
    "to_csv",
]
