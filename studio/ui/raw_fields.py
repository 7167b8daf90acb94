"""Form fields whose values reach the handlers as the client sent them, for the validation boundary
to judge."""

from __future__ import annotations

from typing import Any

import gradio as gr


class RawNumber(gr.Number):
    """A number field that hands its value over unrounded and unconverted.

    Gradio's own `Number` rounds to its precision (steps=2.5 would silently run 2 steps) and fails on text
    with a generic error; here `studio.request` refuses both with a sentence that says what to send.
    """

    is_template = True  # rendered by the frontend as a plain number field

    def preprocess(self, payload: Any) -> Any:
        return payload
