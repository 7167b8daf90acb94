"""The Cards tab's handlers: `/cards` (the fixed suite measured here, written as a card into the studio's
home), the suite's models for a device, `/machines` (the cards of many machines, one table per model), and a
winner of the card just measured or of any card the Machines view loaded into Generate's form (the way History
loads a logged run: `form_values`), checked for this machine: another machine's GPU card runs here on this
machine's device, and a configuration this machine cannot run is one sentence.

Options are checked (`studio.cards.options.validate_options`, then every model's request and
configuration in `run_cards`) before anything runs; a bad one is one sentence, as `gr.Error`. A cancelled run
writes nothing and says where it stopped. After a run, the regression report against this machine's newest
card before it (`studio.cards.regression`); "Compare two cards" reports on two cards of the studio's folder
without measuring.

`CardsTab` holds what needs the studio or the cancel flags (the run and what it will take); the rest are plain
functions. Each returns what it fills by name (the tab names its components the same, `studio.ui.views.named`)
or at most two values."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gradio as gr
from PIL import Image

from pipelines.sources import inside_roots
from studio import devices
from studio.cards import card as card_files
from studio.cards import hub, picks, regression, wording
from studio.cards.collection import load_folder, machine_name, machines_markdown
from studio.cards.machine import this_fingerprint
from studio.cards.options import expected, validate_options
from studio.cards.run_suite import CardRun, run_cards
from studio.cards.suite import CPU_CASES, GPU_CASES, suite_for
from studio.engine import Studio
from studio.errors import Cancelled, StudioError, UnavailableError, ValidationError, describe
from studio.request import build_request, with_config
from studio.ui import progress_views
from studio.ui.cancel import Cancellations
from studio.ui.handlers.common import cancel_controls, cancellable_run, engine_errors, form_values

NOTHING_WRITTEN = "Nothing was written: a card is written only once every model is measured."
STOPPING = "Stopping at the next denoising step: a cancelled run writes no card."
# What a card's model entry ran, as `build_request` takes it (with the entry's `batch`).
REQUEST_KEYS = ("model", "prompt", "seed", "steps", "guidance", "width", "height", "scheduler", "device")
SUITE_CASES = {case.model: case for case in (*GPU_CASES, *CPU_CASES)}  # a model's prompt and seed


def suite_models(device: str | None) -> list[str]:
    """The suite's models on `device` ('auto', 'cpu', 'cuda:0', ...) of this machine, in the suite's order."""
    return [case.model for case in suite_for(devices.detect(), devices.resolve(device or "auto"))]


def config_lines(text: Any) -> list[str] | Any:
    """Configurations one per line (a configuration's settings hold commas: 'openvino[mode=fp32,vae=false]');
    what is not text is left for `validate_options` to refuse."""
    if not isinstance(text, str):
        return text
    return [line.strip() for line in text.splitlines() if line.strip()]


def as_cards(cards: Any) -> list[dict[str, Any]]:
    """The card just measured (a dict) or the Machines view's cards (a list) as a list; None: none."""
    if cards is None:
        return []
    return [cards] if isinstance(cards, dict) else list(cards)


def winner_choice(entry: dict[str, Any], winner: dict[str, Any], machine: str | None = None) -> str:
    """How a winners' menu names one: 'tiny-shapes 64x64, 20 steps — keeps the math: channels_last', with
    the machine in front in the Machines view's menu ('Intel Xeon with AMX — sd15-arch 256x256, ...')."""
    named = f"{wording.shape(entry)} — {picks.WORDS[winner['kind']]}: {winner['config']}"
    return f"{machine} — {named}" if machine else named


def machine_labels(cards: list[dict[str, Any]]) -> list[str]:
    """Each card's machine as the Machines view's menu names it: the tables' name up to its details in
    brackets ('Intel Xeon with AMX'), whole where two machines of different names would read alike."""
    full = [machine_name(card) for card in cards]
    short = {name: name.split(" (", 1)[0] for name in full}
    names = Counter(short.values())  # how many different machines each short name stands for
    return [short[name] if names[short[name]] == 1 else name for name in full]


def named_winners(cards: Any, machines: bool = False) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Every winner of `cards` (see `as_cards`) by its name in the menu, with its model entry; `machines`:
    named with the machine in front (`machine_labels`). Of two with one name (one machine's card loaded
    twice), the first."""
    cards = as_cards(cards)
    labels = machine_labels(cards) if machines else [None] * len(cards)
    found: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for card, machine in zip(cards, labels, strict=True):
        for entry in card["models"]:
            for winner in entry.get("winners") or []:
                found.setdefault(winner_choice(entry, winner, machine), (entry, winner))
    return found


def here(device: str | None) -> str:
    """A card's device when this machine has it ('cuda' measured here), else 'auto': a card from another
    machine runs on this one's device."""
    try:
        return devices.resolve(device or "auto")
    except UnavailableError:  # the card's device is another machine's: this machine's own instead
        return "auto"


def winner_request(cards: Any, chosen: str | None):
    """The request a card measured for the chosen winner (named as either menu names it): its model entry's
    model, shape, scheduler, prompt, seed and batch (the suite's prompt and seed, the model's defaults where a
    transcribed card records none), on its device when this machine has it, with the winner's configuration;
    checked for this machine as any request is (a GPU's fp16 on a CPU is refused with a sentence)."""
    named = {**named_winners(cards, machines=True), **named_winners(cards)}
    if chosen not in named:
        raise ValidationError("Run the suite or load cards first, then choose one of their winners.")
    entry, winner = named[chosen]
    case = SUITE_CASES.get(entry["model"])
    fields = {key: entry.get(key) for key in REQUEST_KEYS}
    fields.update(device=here(entry.get("device")), batch=entry.get("batch") or 1)
    if case is not None:  # a transcribed card records no prompt or seed: the suite's
        fields.update({key: getattr(case, key) for key in ("prompt", "seed") if fields[key] is None})
    return with_config(build_request(**fields), winner["config"])


def older_card() -> dict[str, Any] | None:
    """This machine's newest card in the studio's folder (read before a run writes one); None: none yet."""
    try:
        return regression.newest_of_this_machine(card_files.default_folder(), this_fingerprint())
    except ValidationError:  # no card of this machine yet: nothing to compare against, and nothing said
        return None


def regression_text(old: dict[str, Any], new: dict[str, Any]) -> str:
    """The regression report between two cards (Markdown), or the sentence refusing them (another machine,
    another suite version), starting with ⚠."""
    try:
        return regression.markdown(regression.compare(old, new))
    except ValidationError as exc:
        return f"⚠ {describe(exc)}"


@engine_errors
def regression_view(text: str | None) -> dict[str, Any]:
    """A report shown in Markdown with its copyable block (`report`, `block`, `area`); a refusal (⚠) in
    Markdown alone; nothing (None or ''): the area hidden."""
    copy = bool(text) and not text.startswith("⚠")
    block = gr.update(value=text if copy else "", visible=copy)
    return {"report": text or "", "block": block, "area": gr.update(visible=bool(text))}


def card_names() -> dict[str, dict[str, Any]]:
    """The cards of the studio's folder by file name, newest first."""
    cards = sorted(load_folder(card_files.default_folder()).cards, key=lambda c: c.get("created_at") or "")
    return {Path(c["path"]).name: c for c in reversed(cards)}


@engine_errors
def cards_menus() -> tuple:
    """The menus of "Compare two cards": the folder's cards, the second newest before, the newest after."""
    names = list(card_names())
    before = names[1] if len(names) > 1 else None
    return (
        gr.update(choices=names, value=before),
        gr.update(choices=names, value=names[0] if names else None),
    )


@engine_errors
def compare_cards(before: str | None, after: str | None) -> dict[str, Any]:
    """The regression report between two cards of the studio's folder, chosen by file name, nothing
    measured (`regression_view`'s outputs); a refusal or a missing choice as a sentence."""
    cards = card_names()
    if before not in cards or after not in cards:
        return regression_view(f"⚠ Choose two cards of {card_files.default_folder()}: before and after.")
    if before == after:
        return regression_view("⚠ Choose two different cards: the one before the change and the one after.")
    return regression_view(regression_text(cards[before], cards[after]))


def finished(run: CardRun, older: dict[str, Any] | None = None) -> dict[str, Any]:
    """A finished run's outputs by name: the card written into the studio's home, its summary, the contact
    sheet (shown twice its size: its captions are a small bitmap font), the files' paths, the card, and the
    regression report against `older` (this machine's newest card before the run; '': none)."""
    files = card_files.save(run)
    with Image.open(files["sheet"]) as written:
        sheet = written.resize((2 * written.width, 2 * written.height), Image.Resampling.NEAREST)
    listing = "\n".join(f"{kind}: {path}" for kind, path in files.items())
    summary = card_files.summary(run.card)
    shown = {"summary": summary, "sheet": sheet, "files": listing, "card": run.card}
    report = "" if older is None else regression_text(older, {**run.card, "path": str(files["card"])})
    return {"results": gr.update(visible=True), **shown, "regression": report}


def cancelled(exc: Cancelled) -> dict[str, Any]:
    """A cancelled run's outputs by name (those of `finished`): where it stopped, and that nothing was
    written."""
    said = progress_views.sentence(exc, "Cards", NOTHING_WRITTEN)
    shown = {"summary": said, "sheet": None, "files": "", "card": None, "regression": ""}
    return {"results": gr.update(visible=True), **shown}


def plan_note(studio: Studio, **form: Any) -> str:
    """What the run will do and take, said before it starts: what the search budget covers (the fixed
    configurations' first calls count against it) and the whole run's expected time
    (`studio.cards.options.expected`, from this studio's logged first calls and the cards'); a bad option's
    sentence instead (the same one Run would answer)."""
    try:
        options = validate_options(**{**form, "configs": config_lines(form.get("configs"))})
        found = expected(options, studio)
    except StudioError as exc:
        return f"⚠ {describe(exc)}"
    if not found.searches:
        covers = (
            "Nothing is searched (configurations given, or a fixed list on this device): no budget applies."
        )
    else:
        covers = (
            f"The budget ({options.budget_s:g} s per model) covers the first calls (compiles, conversions) "
            "of the configurations measured before the search, and the auto-tuner's search, which gets what "
            "is left; the interleaved rounds come on top."
        )
    return f"{covers} {found.words}"


def winners_menu(cards: Any, machines: bool = False) -> tuple:
    """The winners of `cards` (see `as_cards`) to choose from for Generate, named as `named_winners` names
    them, and the menu's button (disabled without a winner)."""
    choices = list(named_winners(cards, machines))
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


@engine_errors
def cards_models(device, chosen):
    """The models menu for the device now chosen (those still in its suite stay chosen)."""
    names = suite_models(device)
    return gr.update(choices=names, value=[m for m in chosen or [] if m in names] or names[:1])


@engine_errors
def use_card_winner(cards, chosen) -> dict[str, Any]:
    """The chosen winner of `cards` (the card just measured, or the Machines view's) in Generate's form, by
    field name (`form_values`), at the model and shape its card measured (`winner_request`); Generate shown
    (`tabs`)."""
    request = winner_request(cards, chosen)
    return {**form_values(request.columns()), "tabs": gr.update(selected="generate")}


@engine_errors
def machines(source="") -> dict[str, Any]:
    """The cards of this studio, of the project (docs/cards) and of `source` (a folder or a dataset as
    OWNER/DATASET), one table per model, by name: the tables in Markdown (`tables`), the sentences on what was
    not read (`notes`), the data (`machines`: {"tables", "refused", "note"}, as `python -m studio cards
    --machines --json`), and the cards themselves (`cards`: for the view's winners menu, a State no client
    sees)."""
    found = hub.machines(checked_source(source))
    shown = {"tables": machines_markdown(found.tables), "notes": machines_notes(found)}
    return {**shown, "machines": found.data(), "cards": found.cards}


def machines_menu(cards):
    """The Machines view's winners: every loaded card's, named with its machine in front."""
    return winners_menu(cards, machines=True)


class CardsTab:
    """The Cards tab's event functions that need this studio or the sessions' cancel flags."""

    def __init__(self, studio: Studio, cancels: Cancellations):
        self.studio = studio
        self.cancels = cancels

    @engine_errors
    def cards(
        self,
        models,
        device,
        budget_s,
        configs,
        warmup,
        rounds,
        request: gr.Request = None,
        progress=gr.Progress(),
    ) -> dict[str, Any]:
        """The fixed suite on this machine (`models`: a subset of the device's suite), written as a card into
        the studio's home, its outputs by name (`finished`, `cancelled`); `configs` (one per line) are
        measured instead of the auto-tuner's search within `budget_s` seconds per model."""
        # first: it takes the flag a click reserved
        with cancellable_run(self.cancels, request, "cards") as should_stop:
            options = validate_options(
                models=models,
                budget_s=budget_s,
                configs=config_lines(configs),
                rounds=rounds,
                warmup=warmup,
                device=device,
            )
            older = older_card()
            try:
                done = run_cards(
                    options,
                    studio=self.studio,
                    progress=lambda fraction, where: progress(fraction, desc=f"Cards: {where}"),
                    should_stop=should_stop,
                )
            except Cancelled as exc:
                return cancelled(exc)
            return finished(done, older)

    def cards_plan(self, models, device, budget_s, configs, warmup, rounds) -> str:
        """What the run with the form's options will do and take (`plan_note`), said as the form changes."""
        form = {"models": models, "device": device, "budget_s": budget_s, "configs": configs}
        return plan_note(self.studio, **form, warmup=warmup, rounds=rounds)


def build_cards_handlers(studio: Studio, cancels: Cancellations) -> dict[str, Callable]:
    """The Cards tab's event functions by name: the run's and its plan's on `studio` and `cancels`."""
    tab = CardsTab(studio, cancels)
    return {
        "cards": tab.cards,
        "cards_plan": tab.cards_plan,
        **cancel_controls(cancels, "cards", STOPPING),
        "cards_models": cards_models,
        "winners_menu": winners_menu,
        "use_card_winner": use_card_winner,
        "machines": machines,
        "machines_menu": machines_menu,
        "regression_view": regression_view,
        "cards_menus": cards_menus,
        "compare_cards": compare_cards,
    }
