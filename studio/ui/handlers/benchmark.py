"""The Benchmark tab's handlers: `/benchmark` (the fixed suite measured here, written as a card into the
studio's home), the suite's models for a device, a card's winner into Generate's form (the way History loads a
logged run: `form_values`), and `/machines` (the cards of many machines, one table per model).

Options are checked (`studio.benchmark.options.validate_options`, then every model's request and
configuration in `run_benchmark`) before anything runs; a bad one is one sentence, as `gr.Error`. A cancelled
benchmark writes nothing and says where it stopped."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

from pipelines.sources import inside_roots
from studio import devices
from studio.benchmark import card as card_files
from studio.benchmark import cards, hub, picks
from studio.benchmark.options import validate_options
from studio.benchmark.runner import run_benchmark
from studio.benchmark.suite import suite_for
from studio.engine import Studio
from studio.engine.run_data import run_columns
from studio.errors import Cancelled, ValidationError
from studio.request import validate_request, with_config
from studio.ui import progress_views
from studio.ui.cancel import Cancellations
from studio.ui.handlers.common import engine_errors, form_values, session_of, stop_check

NOTHING_WRITTEN = "Nothing was written: a card is written only once every model is measured."
STOPPING = "Stopping at the next denoising step: a cancelled benchmark writes no card."
# What a card's model entry ran, as `validate_request` takes it (the entry's `batch` is its `num_images`).
REQUEST_KEYS = ("model", "prompt", "seed", "steps", "guidance", "width", "height", "scheduler", "device")


def suite_models(device: str | None) -> list[str]:
    """The suite's models on `device` ('auto', 'cpu', 'cuda:0', ...) of this machine, in the suite's order."""
    return [case.model for case in suite_for(devices.detect(), devices.resolve(device or "auto"))]


def config_lines(text: Any) -> list[str] | Any:
    """Configurations one per line (a configuration's settings hold commas: 'openvino[mode=fp32,vae=false]');
    what is not text is left for `validate_options` to refuse."""
    if not isinstance(text, str):
        return text
    return [line.strip() for line in text.splitlines() if line.strip()]


def winner_choice(entry: dict[str, Any], winner: dict[str, Any]) -> str:
    """How the winners' menu names one: 'tiny-shapes, keeps the math: channels_last'."""
    return f"{entry['model']}, {picks.WORDS[winner['kind']]}: {winner['config']}"


def winner_choices(card: dict[str, Any]) -> list[str]:
    return [winner_choice(entry, w) for entry in card["models"] for w in entry.get("winners") or []]


def winner_request(card: dict[str, Any] | None, chosen: str | None):
    """The request the card measured for the chosen winner: its model's shape, prompt and seed, with the
    winner's configuration (checked for this machine as any request is)."""
    for entry in (card or {}).get("models") or []:
        for winner in entry.get("winners") or []:
            if winner_choice(entry, winner) == chosen:
                fields = {key: entry[key] for key in REQUEST_KEYS}
                return with_config(validate_request(**fields, num_images=entry["batch"]), winner["config"])
    raise ValidationError("Run the benchmark first, then choose one of its winners to use in Generate.")


def finished(benchmark: Any) -> tuple:
    """A finished benchmark's outputs: the card written into the studio's home, its summary, the contact
    sheet (shown twice its size: its captions are a small bitmap font), the files' paths and the card."""
    files = card_files.save(benchmark)
    with Image.open(files["sheet"]) as written:
        sheet = written.resize((2 * written.width, 2 * written.height), Image.Resampling.NEAREST)
    listing = "\n".join(f"{kind}: {path}" for kind, path in files.items())
    return gr.update(visible=True), card_files.summary(benchmark.card), sheet, listing, benchmark.card


def cancelled(exc: Cancelled) -> tuple:
    """A cancelled benchmark's outputs: where it stopped, and that nothing was written."""
    return gr.update(visible=True), progress_views.sentence(exc, "Benchmark", NOTHING_WRITTEN), None, "", None


def winners_menu(card: dict[str, Any] | None) -> tuple:
    """The card's winners to choose from for Generate, and its button (disabled without a winner)."""
    choices = winner_choices(card) if card else []
    use = gr.update(interactive=bool(choices), value="Use in Generate" if choices else "No winner to use")
    return gr.update(choices=choices, value=choices[0] if choices else None), use


def checked_source(source: Any) -> str:
    """The Machines view's source: '' (this studio's and the project's cards), a folder inside the roots
    local models may come from (`STUDIO_MODEL_ROOTS`), or a dataset repository as OWNER/DATASET."""
    if source is None or (isinstance(source, str) and not source.strip()):
        return ""
    if not isinstance(source, str):
        raise ValidationError(f"The cards' source must be text (a folder or OWNER/DATASET), not {source!r}.")
    source = source.strip()
    if Path(source).is_dir():
        return str(inside_roots(Path(source), "The cards folder"))
    if not hub.DATASET.match(source):
        raise ValidationError(
            f"{source!r} is no folder here, nor a dataset repository written as OWNER/DATASET."
        )
    return hub.check_repo(source)


def machines_notes(found: hub.Machines) -> str:
    """The sentences beside the tables: why a dataset's cards are missing, then each file refused."""
    parts = [f"⚠ {found.note}"] if found.note else []
    if found.refused:
        count = len(found.refused)
        lines = [f"- {sentence}" for sentence in found.refused]
        parts.append("\n".join([f"Not read as cards: {count} file{'s' if count != 1 else ''}.", *lines]))
    return "\n\n".join(parts)


def build_benchmark_handlers(studio: Studio, cancels: Cancellations) -> dict[str, Callable]:
    """The Benchmark tab's event functions, closed over one Studio and the sessions' cancel flags."""

    @engine_errors
    def benchmark(
        models, device, budget_s, configs, warmup, rounds, request: gr.Request = None, progress=gr.Progress()
    ):
        """The fixed benchmark suite on this machine (`models`: a subset of the device's suite), written as a
        card into the studio's home: its summary, contact sheet, files and the card; `configs` (one per line)
        are measured instead of the auto-tuner's search within `budget_s` seconds per model."""
        should_stop = stop_check(cancels, request)  # first: it takes the flag a click reserved
        options = validate_options(models, budget_s, config_lines(configs), rounds, warmup, device)
        try:
            done = run_benchmark(
                options,
                studio=studio,
                progress=lambda fraction, where: progress(fraction, desc=f"Benchmark: {where}"),
                should_stop=should_stop,
            )
        except Cancelled as exc:
            return cancelled(exc)
        return finished(done)

    @engine_errors
    def models_for(device, chosen):
        """The models menu for the device now chosen (those still in its suite stay chosen)."""
        names = suite_models(device)
        return gr.update(choices=names, value=[m for m in chosen or [] if m in names] or names[:1])

    @engine_errors
    def use_winner(card, chosen):
        """The chosen winner in Generate's form, at the model and shape the card measured; Generate shown."""
        request = winner_request(card, chosen)
        return (*form_values(run_columns(request, 0, 0, None)), gr.update(selected="generate"))

    @engine_errors
    def machines(source=""):
        """The cards of this studio, of the project (docs/cards) and of `source` (a folder or a dataset as
        OWNER/DATASET), one table per model: the tables in Markdown, the sentences on what was not read, and
        the data ({"tables", "refused", "note"}, as `python -m studio benchmark --machines --json`)."""
        found = hub.machines(checked_source(source))
        return cards.machines_markdown(found.tables), machines_notes(found), found.data()

    def cancel_benchmark(request: gr.Request):
        """The tab's Cancel: stops the session's benchmark at its next denoising step (and one that waits)."""
        return STOPPING if cancels.cancel(session_of(request)) else "Nothing is running."

    return {
        "benchmark": benchmark,
        "cancel_benchmark": cancel_benchmark,
        "benchmark_models": models_for,
        "winners_menu": winners_menu,
        "use_card_winner": use_winner,
        "machines": machines,
    }
