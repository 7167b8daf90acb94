"""The run log's schema: sqlite-utils migrations m001, m002, ..., applied in order by `RunLog`.

A database records each migration applied by its name (the `_sqlite_migrations` table), so a migration keeps
its name and place once released; a change to the schema is a new migration at the end.
"""

from __future__ import annotations

import json

from sqlite_utils import Database, Migrations

migrations = Migrations("diffusion-studio")


@migrations()
def m001_create_runs(db: Database) -> None:
    db["groups"].create(
        {
            "id": int,
            "created_at": str,
            "finished_at": str,
            "kind": str,
            "model": str,
            "prompt": str,
            "seed": int,
            "settings": str,
            "status": str,
            "error": str,
        },
        pk="id",
    )
    db["runs"].create(
        {
            "id": int,
            "created_at": str,
            "finished_at": str,
            "status": str,
            "error": str,
            "group_id": int,
            "config_label": str,
            "model": str,
            "device": str,
            "hardware": str,
            "dtype": str,
            "requested": str,
            "applied": str,
            "params": str,
            "prompt": str,
            "negative_prompt": str,
            "seed": int,
            "steps": int,
            "width": int,
            "height": int,
            "guidance": float,
            "scheduler": str,
            "num_images": int,
            "warmup": int,
            "repeats": int,
            "latency_median": float,
            "latency_min": float,
            "latency_max": float,
            "latency_all": str,
            "warmup_seconds": str,
            "first_call_seconds": float,
            "load_seconds": float,
            "switch_seconds": float,
            "step_median": float,
            "step_seconds": str,
            "steps_per_second": float,
            "peak_memory": int,
            "memory_added": int,
            "memory_kind": str,
            "image_path": str,
            "image_paths": str,
            "baseline_run_id": int,
            "max_abs_diff": float,
            "psnr": float,
            "ssim": float,
            "fidelity": str,
            "versions": str,
            "stats": str,
        },
        pk="id",
        foreign_keys=[("group_id", "groups", "id")],
    )
    db["runs"].create_index(["created_at"])
    db["runs"].create_index(["model", "status"])


@migrations()
def m002_sweep_figures(db: Database) -> None:
    """Per-round speedups and their verdict (interleaved sweeps), host noise, per-call memory."""
    for column, kind in (
        ("speedup", float),
        ("speedup_min", float),
        ("speedup_max", float),
        ("verdict", str),
        ("host_busy_pct", float),
        ("host_steal_pct", float),
        ("warmup_unsettled", int),
        ("memory_added_all", str),
    ):
        db["runs"].add_column(column, kind)


@migrations()
def m003_run_owner(db: Database) -> None:
    """Which process computes a running run (host, pid, its start time), so only a dead owner's runs are
    marked interrupted."""
    for column, kind in (("owner_host", str), ("owner_pid", int), ("owner_started", float)):
        db["runs"].add_column(column, kind)


@migrations()
def m004_settings_column(db: Database) -> None:
    """A run's technique settings are called settings everywhere, the run log included."""
    db.execute("ALTER TABLE runs RENAME COLUMN params TO settings")


@migrations()
def m005_model_sources(db: Database) -> None:
    """What a run's pipeline was read with beyond the model: the VAE swapped in and, for a single-file
    checkpoint, the folder its configs came from (both empty for the model as it ships)."""
    for column in ("vae", "single_file_config"):
        db["runs"].add_column(column, str)


@migrations()
def m006_profile(db: Database) -> None:
    """A profiled step's figures (`studio.measure.step_profile`: time by kind, top operators, FLOPs, peak), as
    JSON; empty for runs that were not profiles."""
    db["runs"].add_column("profile", str)


@migrations()
def m007_memory_resident(db: Database) -> None:
    """The bytes of the pipeline's own weights on the device when a run's call started: with what the call
    adds, a configuration's footprint (an offloaded pipeline starts with none of its weights there)."""
    db["runs"].add_column("memory_resident", int)


@migrations()
def m008_first_call_phase(db: Database) -> None:
    """What a run's first call paid for what its techniques prepare: the slowest phase (cold: compiled,
    converted or calibrated now; warm: from this machine's caches; package: loaded compiled) and the seconds
    the preparing took (`studio.phases`)."""
    db["runs"].add_column("first_call_phase", str)
    db["runs"].add_column("prepare_seconds", float)


@migrations()
def m009_prompt_score(db: Database) -> None:
    """How well a run's first image shows its prompt (`studio.measure.prompt_score`): the score (0-100), its
    scorer ('clip:<model id>' or 'fidelity judge'), its change against the baseline's in points, and why there
    is none; empty for runs logged before."""
    for column, kind in (
        ("prompt_score", float),
        ("prompt_score_by", str),
        ("prompt_score_change", float),
        ("prompt_score_note", str),
    ):
        db["runs"].add_column(column, kind)


@migrations()
def m010_run_visitor(db: Database) -> None:
    """Whose run it is on a public studio (`studio.visitors`: 'user:<account>', 'browser:<id>' or
    'session:<hash>'); empty for the local user's runs and for every run logged before, which only the owners
    read there."""
    db["runs"].add_column("visitor", str)
    db["runs"].create_index(["visitor"], if_not_exists=True)


@migrations()
def m011_run_loras(db: Database) -> None:
    """The LoRAs a run was drawn with, as JSON: a list of {"name", "scale", "hash"} (the hash as AUTOMATIC1111
    writes it); empty for runs without any and for every run logged before."""
    db["runs"].add_column("loras", str)


# The runs' columns the faces name otherwise, as m012 renames them: earlier names -> the faces' words.
RENAMED = {"num_images": "batch", "repeats": "rounds", "latency_median": "latency_s"}


def current_names(columns: dict) -> dict:
    """`columns` (a run's, as an image saved by an earlier release carries them) in today's names."""
    return {RENAMED.get(name, name): value for name, value in columns.items()}


@migrations()
def m012_face_words(db: Database) -> None:
    """A run's images per call, timed calls and median latency are called `batch`, `rounds` and `latency_s`,
    as in the form, the API and the records; an auto-tune's settings (a group's JSON) say `rounds` too, and
    a Combinations group is of kind `combinations`, as its tab, command and endpoint are named."""
    for old, new in RENAMED.items():
        db.execute(f"ALTER TABLE runs RENAME COLUMN {old} TO {new}")
    db.execute("UPDATE groups SET kind = 'combinations' WHERE kind = 'matrix'")
    for row in list(db.query("SELECT id, settings FROM groups WHERE settings LIKE '%\"repeats\"%'")):
        settings = current_names(json.loads(row["settings"]))
        db.execute("UPDATE groups SET settings = ? WHERE id = ?", [json.dumps(settings), row["id"]])
