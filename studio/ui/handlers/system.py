"""System's handler: `/system`, what this machine can run (its devices, capabilities, versions and
techniques), as the API's JSON, a summary and a table of the techniques."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from studio.engine import Studio
from studio.ui import views


class SystemHandlers:
    """System's event function over one Studio."""

    def __init__(self, studio: Studio) -> None:
        self.studio = studio

    def system(self) -> tuple[dict, str, pd.DataFrame]:
        """What this machine can run: its facts (JSON), a summary and the techniques that run here."""
        data = self.studio.system_facts()
        return data, *views.system_tables(data)


def build_system_handlers(studio: Studio) -> dict[str, Callable]:
    """System's event function by name, over one Studio (`SystemHandlers`)."""
    return {"system": SystemHandlers(studio).system}
