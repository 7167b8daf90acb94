"""The Gradio Blocks app: Generate, Compare, Ladder, Combinations, Auto-tune, Cards, History, Profile, Shard
and System.

`build_demo()` returns the Blocks; `launch_kwargs()` the launch settings (theme, css,
queue sizes and file limits live there in Gradio 6). Endpoints: `/generate`, `/cancel`, `/read_image`,
`/compare`, `/ladder`, `/combinations` (every pair of techniques), `/autotune`, `/cards` (the suite
measured here, written as a card), `/machines` (the cards of many machines, one table per model), `/history`,
`/load_config`, `/export_db`, `/profile`, `/shard`, `/system`.
Each tab is built in `studio.ui.tabs`, its events handled in `studio.ui.handlers`. The MCP tools
(`generate`, `compare`, `autotune`, `history`, `system`; endpoints `/mcp_*`) are in `studio.ui.mcp_tools`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import gradio as gr

from studio import visitors
from studio.engine import Studio
from studio.ui.cancel import Cancellations
from studio.ui.fair_queue import bound_jobs
from studio.ui.handlers import build_handlers
from studio.ui.handlers.combinations_handlers import build_combinations_handlers
from studio.ui.mcp_server import MCP_COUNT_HEAD, hide_form_endpoints
from studio.ui.mcp_tools import mcp_enabled, register_mcp_tools
from studio.ui.tabs.autotune_tab import autotune_tab
from studio.ui.tabs.cards_tab import cards_tab
from studio.ui.tabs.combinations_tab import combinations_tab
from studio.ui.tabs.compare_tab import compare_tab, ladder_tab
from studio.ui.tabs.generate_tab import generate_tab
from studio.ui.tabs.history_tab import history_tab
from studio.ui.tabs.profile_tab import profile_tab
from studio.ui.tabs.shard_tab import shard_tab
from studio.ui.tabs.system_tab import system_tab
from studio.ui.visiting import HEAD, oauth_on, visiting_all

CSS_PATH = Path(__file__).resolve().parents[2] / "assets" / "studio.css"
# Every table fits a 1280 px page: Gradio sizes a table's columns from its longest cells laid out on one line,
# so cells wrap (at spaces, and a configuration after each '+': `views.styled`) when measured and when shown.
# Compare's and the Ladder's tables show all their rows (wrapped rows are taller than the 500 px Gradio
# scrolls within); History's and Auto-tune's long ones scroll. Compare's gallery grows with its rows (Gradio
# caps it at 55% of the window and scrolls inside, which hid the last captions of an X/Y sweep).
# Auto-tune's dozens of rows scroll. The Combinations table (one column per technique, each its share of the
# page) sets its cells in the page's font, smaller, so that a dozen and more columns fit. Every other table's
# headers wrap between words, never inside one: a column is at least as wide as its header's longest word
# (Gradio sizes it from the cells, and a short column's header, Compare's "Latency", broke as "Latenc|y").
SWEEP_TABLES = ("#ladder-table", "#cmp-table", "#cmp-details", "#combinations-table")
# The Machines tables are Markdown (one per model, as many as the cards measured): fixed columns (the
# machine's name and the two winners get the room), words wrap whole, a long configuration anywhere. A card's
# summary: words wrap whole, its headings no larger than the page's.
WHOLE_WORDS = ".table-wrap th:not(#combinations-table th)"  # the headers that wrap between words only
MACHINE_COLUMNS = (18, 12, 7, 5, 6, 26, 26)  # % of the width: device, shape, s/image, it/s, MB, winners
CSS = f"""
.table-wrap td .cell-wrap {{ white-space: normal; overflow-wrap: break-word; }}
{WHOLE_WORDS} {{ min-width: min-content !important; max-width: none !important; }}
{WHOLE_WORDS} span.header {{ word-break: normal !important; overflow-wrap: normal !important; }}
{", ".join(f"{t} .virtual-table-viewport" for t in SWEEP_TABLES)} {{ max-height: none !important; }}
#cmp-gallery .grid-wrap.fixed-height {{ max-height: none; }}
#machines-md table {{ table-layout: fixed; width: 100%; }}
#machines-md th, #machines-md td {{ word-break: normal; overflow-wrap: break-word; vertical-align: top; }}
#machines-md td code {{ overflow-wrap: anywhere; }}
{" ".join(f"#machines-md th:nth-child({i}) {{ width: {w}%; }}" for i, w in enumerate(MACHINE_COLUMNS, 1))}
#cards-summary h1 {{ font-size: 1.5rem; }} #cards-summary h2 {{ font-size: 1.2rem; }}
#cards-summary th, #cards-summary td {{ word-break: normal; overflow-wrap: break-word; }}
#cards-compare td, #cards-compare th {{ word-break: normal; overflow-wrap: normal; }}
#combinations-table th *, #combinations-table .body-cell * {{
  font-size: 12px !important; font-family: var(--font) !important;
}}
#combinations-table th * {{ font-size: 11px !important; }}
"""


def queue_size() -> int:
    return int(os.environ.get("STUDIO_QUEUE_MAX", "16"))


def build_demo(studio: Studio | None = None) -> gr.Blocks:
    """The whole app around one Studio (a new one on the default database if not given)."""
    studio = studio or Studio()
    cancels = Cancellations()
    handlers = visiting_all(
        {**build_handlers(studio, cancels), **build_combinations_handlers(studio, cancels)}
    )
    with gr.Blocks(title="Diffusion Studio") as demo:
        mcp_tools = register_mcp_tools(studio)  # first: the tools take the plain names (generate, ...)
        gr.Markdown(
            "# Diffusion Studio\nRun diffusers pipelines fast, and measure it honestly.", elem_id="title"
        )
        if oauth_on():  # a Space with hf_oauth: visitors sign in to keep their history under their account
            gr.LoginButton()
        with gr.Tabs() as tabs:
            with gr.Tab("Generate", id="generate"):
                generate = generate_tab(handlers)
            with gr.Tab("Compare", id="compare"):
                compare_tab(handlers)
            with gr.Tab("Ladder", id="ladder"):
                ladder_tab(handlers)
            with gr.Tab("Combinations", id="combinations"):
                combinations_tab(handlers)
            with gr.Tab("Auto-tune", id="autotune"):
                autotune_tab(handlers, generate, tabs)
            with gr.Tab("Cards", id="cards") as cards:
                cards_tab(handlers, generate, tabs, cards)
            with gr.Tab("History", id="history") as history:
                history_tab(handlers, generate, tabs, history)
            with gr.Tab("Profile", id="profile"):
                profile_tab(handlers)
            with gr.Tab("Shard", id="shard"):
                shard_tab(handlers, generate, tabs)
            with gr.Tab("System", id="system") as system:
                system_tab(handlers, system)
    hide_form_endpoints(demo, mcp_tools)
    if visitors.mode() == "private":  # a public studio: no visitor takes the queue (`fair_queue`)
        bound_jobs(demo)
    demo.queue(max_size=queue_size(), default_concurrency_limit=1)
    return demo


def launch_kwargs() -> dict[str, Any]:
    """Launch settings: where the server listens (STUDIO_HOST and STUDIO_PORT, else Gradio's own
    GRADIO_SERVER_NAME and GRADIO_SERVER_PORT, which a Hugging Face Space sets to 0.0.0.0 and 7860; else
    127.0.0.1:7860), theme and css (they live here in Gradio 6: `CSS`, then assets/studio.css), the upload
    limit, and the MCP server (at /gradio_api/mcp/, unless STUDIO_MCP=0) with its tool count in the API
    page's header."""
    env = os.environ.get
    auth = env("STUDIO_AUTH")
    return {
        "server_name": env("STUDIO_HOST") or env("GRADIO_SERVER_NAME") or "127.0.0.1",
        "server_port": int(env("STUDIO_PORT") or env("GRADIO_SERVER_PORT") or 7860),
        "theme": gr.themes.Soft(),
        "css": CSS,
        "css_paths": [CSS_PATH] if CSS_PATH.exists() else None,
        "max_file_size": "10mb",
        "auth": tuple(auth.split(":", 1)) if auth and ":" in auth else None,
        "footer_links": ["api", "gradio"],
        "mcp_server": mcp_enabled(),
        # the browser's id for the studio (`studio.ui.visiting`); the API page counts the MCP tools listed
        "head": HEAD + (MCP_COUNT_HEAD if mcp_enabled() else ""),
    }
