"""Compare's ready-made configurations: those whose every technique can run on the chosen model here (UNet
techniques for SD/SDXL, step caches for transformer models, …); the rest are not offered. Ticked at first are
the ones likely to pay on this device (`likely_to_pay`), and where ticked boxes or a typed configuration hold
techniques that cannot combine, a note beside the boxes says so with the registry's reason."""

from __future__ import annotations

import itertools

import gradio as gr

from studio import devices
from studio.errors import ConflictError, ValidationError
from studio.optimizations import REGISTRY, availability, check_conflicts, conflicts_of
from studio.request.configs import parse_config
from studio.ui.handlers.common import family_of

# Each technique declares the presets that show it off (`Optimization.presets`), each with its place here.
PRESETS = tuple(
    p.label for p in sorted((p for opt in REGISTRY.values() for p in opt.presets), key=lambda p: p.position)
)
PRESELECTED = 2  # boxes ticked at first, at most


def presets_for(family: str | None, device: str = "auto") -> list[str]:
    """The presets that can run on a model of this family (None: not known yet) on this machine."""
    available = {t["name"] for t in availability(device, family=family) if t["unavailable"] is None}
    return [p for p in PRESETS if set(p.split(",")) <= available]


def likely_to_pay(preset: str, device: str = "auto") -> bool:
    """Whether every technique of `preset` is likely to make a call faster on `device` here: one the
    auto-tuner tries (`autotune == "candidate"`: not a reference or a memory saver that costs time, nor a
    compile of minutes), and no change of precision off a GPU: torch on a CPU runs the bundled model's bf16
    slower than its fp32 even with AMX (×0.5–0.9 at 8 steps on an Intel Xeon with AMX: `python -m studio
    compare --prompt "a red circle" --steps 8 --rounds 3 --config bf16`)."""
    on_gpu = devices.resolve(device).startswith("cuda")
    optimizations = [REGISTRY[name] for name in preset.split(",")]
    return all(o.autotune == "candidate" and (on_gpu or o.group != "precision") for o in optimizations)


def preselected(presets: list[str], device: str = "auto") -> list[str]:
    """The boxes ticked at first: the first `PRESELECTED` presets likely to pay here (none when none is)."""
    return [p for p in presets if likely_to_pay(p, device)][:PRESELECTED]


def presets_for_model(model: str, custom: str, ticked: list[str] | None) -> dict:
    """Compare's configuration boxes for the model now chosen: what can run on it, with the ticks that still
    can kept."""
    presets = presets_for(family_of(model, custom))
    return gr.update(choices=presets, value=[p for p in ticked or [] if p in presets])


def _names(config: str) -> set[str]:
    """The technique names of a configuration as typed ('bf16,channels_last', 'openvino[mode=fp32]'); none
    for one Compare will refuse as malformed (it says why when it starts)."""
    try:
        return set(parse_config(config)[0])
    except ValidationError:
        return set()


def conflicts_note(ticked: list[str] | None, custom: str | None) -> str:
    """What cannot combine among Compare's configurations, with the registry's reason: two ticked boxes
    (each still runs as its own configuration against the baseline, never together), and a typed line
    (refused when Compare starts); "" when everything can."""
    said = []
    for a, b in itertools.combinations(ticked or [], 2):
        clash = sorted((x, y) for x in _names(a) for y in _names(b) if y in conflicts_of(x))
        if clash:
            x, y = clash[0]
            said.append(
                f"⚠ **{a}** and **{b}** cannot run as one configuration: {x} cannot be combined with {y}. "
                "Compare measures each ticked box on its own against the baseline."
            )
    for line in (custom or "").splitlines():
        try:
            check_conflicts(frozenset(_names(line) & set(REGISTRY)))
        except ConflictError as exc:
            said.append(f"⚠ **{line.strip()}**: {exc} Compare would refuse this line.")
    return "\n\n".join(said)


def conflicts_shown(ticked: list[str] | None, custom: str | None) -> dict:
    """The note beside Compare's boxes (`conflicts_note`), shown only when it says something."""
    note = conflicts_note(ticked, custom)
    return gr.update(value=note, visible=bool(note))
