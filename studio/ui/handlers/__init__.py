"""Event handlers of the Gradio app (the ui package is the only importer of gradio).

Every engine error reaches browser and client users as `gr.Error` with the engine's sentence; a
cancelled run is not an error: it comes back as a neutral "Cancelled after step N" note.
`build_handlers` gathers them by tab: `generate`, `sweeps` (Compare, Ladder, Auto-tune), `cards`
(Cards, Machines), `history`, `profile`, `shard_handlers` (Shard) and `system`; what they share is in
`common`.
"""

from __future__ import annotations

from collections.abc import Callable

from studio.engine import Studio
from studio.ui.cancel import Cancellations
from studio.ui.handlers.cards import build_cards_handlers
from studio.ui.handlers.generate import build_generate_handlers
from studio.ui.handlers.history import build_history_handlers
from studio.ui.handlers.profile import build_profile_handlers
from studio.ui.handlers.shard_handlers import build_shard_handlers
from studio.ui.handlers.sweeps import build_sweep_handlers
from studio.ui.handlers.system import build_system_handlers


def build_handlers(studio: Studio, cancels: Cancellations) -> dict[str, Callable]:
    """The event functions by name, closed over one Studio."""
    return {
        **build_generate_handlers(studio, cancels),
        **build_sweep_handlers(studio, cancels),
        **build_cards_handlers(studio, cancels),
        **build_history_handlers(studio),
        **build_profile_handlers(studio, cancels),
        **build_shard_handlers(studio),
        **build_system_handlers(studio),
    }
