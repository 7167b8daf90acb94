"""The real app as an MCP server, through the `mcp` package's own client (streamable HTTP): five typed
tools (and only those, in the tool list and in the schema), whose request parameters are the request's fields
as `REQUEST_FIELDS` has them, the same engine, validation sentences and run log as the other faces;
`generate` sends the image itself; the same tools as endpoints answer objects."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from gradio_client import Client
from gradio_client.utils import python_type_to_json_schema
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from PIL import Image

from studio.request.fields import REQUEST_FIELDS, REQUIRED
from studio.request.sweep_limits import AutotuneSettings
from studio.runlog import RunLog
from studio.ui import launch_kwargs
from studio.ui.mcp_tools import AUTOTUNE, COMPARE, GENERATE, TOOL_DEFAULTS
from tests.server import Server

TOOLS = {"generate", "compare", "autotune", "history", "system"}
PROMPT = "a big red circle on the left"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("mcp")).start()
    yield srv
    srv.stop()


def mcp(server: Server, talk: Callable[[ClientSession], Awaitable[Any]]) -> Any:
    """`talk` in a fresh MCP session with the studio."""

    async def session() -> Any:
        async with streamable_http_client(server.url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as client:
                await client.initialize()
                return await talk(client)

    return asyncio.run(session())


def call(server: Server, tool: str, **arguments: Any):
    return mcp(server, lambda client: client.call_tool(tool, arguments))


def answer(result) -> Any:
    """A tool's JSON answer: its one text block (generate's is the first of three)."""
    assert not result.isError, result.content
    text, *rest = result.content
    assert text.type == "text" and len(rest) in (0, 2), result.content
    return json.loads(text.text)


def test_the_tool_list_and_the_schema_are_the_five_described_tools(server):
    """The schema is what the page's API/MCP view lists; a form endpoint is no tool, not even by name."""
    tools = {t.name: t.description for t in mcp(server, lambda client: client.list_tools()).tools}
    schema = httpx.get(server.url + "gradio_api/mcp/schema", timeout=30).json()
    assert set(tools) == TOOLS and all(tools.values())
    assert {t["name"]: t["description"] for t in schema} == tools
    assert {(t["meta"]["mcp_type"], t["meta"]["endpoint_name"]) for t in schema} == {
        ("tool", f"mcp_{name}") for name in TOOLS
    }
    for hidden in ("generate_1", "_lambda_", "run_ladder"):
        result = call(server, hidden, prompt=PROMPT)
        assert result.isError and "Unknown tool" in result.content[0].text


def test_the_tools_are_the_five_typed_ones(server):
    tools = {t.name: t for t in mcp(server, lambda client: client.list_tools()).tools}
    assert set(tools) == TOOLS  # the form endpoints (/generate, ...) stay API endpoints, not tools
    generate = tools["generate"]
    assert "run_id" in generate.description and "latency_s" in generate.description
    props = generate.inputSchema["properties"]
    assert generate.inputSchema["required"] == ["prompt"]
    assert props["prompt"]["type"] == "string" and "draw" in props["prompt"]["description"]
    assert props["model"]["default"] == "tiny-shapes"
    assert {"type": "integer"} in props["steps"]["oneOf"]
    assert {"type": "array", "items": {"type": "string"}} in props["optimizations"]["oneOf"]
    assert props["precision"]["enum"] == ["fp32", "bf16", "fp16"]
    assert "request" not in props
    assert all(p.get("description") for p in props.values())
    assert tools["compare"].inputSchema["required"] == ["prompt", "configs"]
    assert tools["history"].inputSchema["properties"]["limit"]["type"] == "integer"
    assert {"min_psnr", "techniques", "confirm_rounds"} <= set(tools["autotune"].inputSchema["properties"])
    assert tools["system"].inputSchema["properties"] == {}


def test_the_tools_request_parameters_are_the_request_fields(server):
    """Each request field a tool takes has, in the tool list, the table's name, type and documentation and,
    in the API's info too (where the empty defaults the schema leaves out show), the table's default; a
    tool's model defaults to the bundled one. Generate takes every field but the two model files."""
    tools = {t.name: t.inputSchema for t in mcp(server, lambda client: client.list_tools()).tools}
    info = httpx.get(server.url + "gradio_api/info", timeout=30).json()["named_endpoints"]
    for tool, listed in {"generate": GENERATE, "compare": COMPARE, "autotune": AUTOTUNE}.items():
        schema = tools[tool]
        assert list(schema["properties"]) == [p if isinstance(p, str) else p.name for p in listed]
        api = {p["parameter_name"]: p for p in info[f"/mcp_{tool}"]["parameters"]}
        for field in (f for f in REQUEST_FIELDS if f.name in listed):
            where = (tool, field.name)
            default = TOOL_DEFAULTS.get(field.name, field.default)
            required = default is REQUIRED
            prop = dict(schema["properties"][field.name])
            assert prop.pop("description") == field.doc, where
            assert prop.pop("default", None) == (None if required or not default else default), where
            assert prop == python_type_to_json_schema(field.annotation), where
            assert (field.name in schema.get("required", [])) == required, where
            assert api[field.name]["parameter_has_default"] != required, where
            if not required:
                assert api[field.name]["parameter_default"] == json.loads(json.dumps(default)), where
    left_out = {f.name for f in REQUEST_FIELDS} - set(tools["generate"]["properties"])
    assert left_out == {"vae", "single_file_config"}


def test_the_auto_tuners_defaults_are_the_same_in_the_form_and_the_tool(server):
    """The Auto-tune form's values and the autotune tool's defaults are the auto-tuner's own
    (`AutotuneSettings`): a user who leaves them gets the same search from either face."""
    info = httpx.get(server.url + "gradio_api/info", timeout=30).json()["named_endpoints"]
    tuned = AutotuneSettings()
    expected = {**vars(tuned.floor), "warmup": tuned.warmup, "rounds": tuned.rounds}
    expected.update(confirm_rounds=tuned.confirm_rounds)
    for endpoint in ("/autotune", "/mcp_autotune"):
        defaults = {p["parameter_name"]: p.get("parameter_default") for p in info[endpoint]["parameters"]}
        assert {name: defaults[name] for name in expected} == expected, endpoint


def test_system_says_what_this_machine_can_run(server):
    facts = answer(call(server, "system"))
    assert {"hardware", "versions", "techniques", "database"} <= set(facts)
    sdpa = next(t for t in facts["techniques"] if t["name"] == "sdpa")
    assert "unavailable" in sdpa


def test_generate_is_timed_logged_and_in_history(server):
    run = answer(
        call(
            server,
            "generate",
            prompt=PROMPT,
            model="tiny-shapes",
            steps=3,
            width=64,
            height=64,
            seed=5,
            optimizations=["channels_last"],
        )
    )
    assert isinstance(run["run_id"], int) and run["latency_s"] > 0
    assert run["applied"] == ["channels_last"] and isinstance(run["warnings"], list)  # a busy host says so
    row = RunLog(server.home / "runs.db").get_run(run["run_id"])
    assert row["status"] == "ok" and row["prompt"] == PROMPT and row["steps"] == 3
    runs = answer(call(server, "history", model="tiny-shapes", limit=5))
    assert run["run_id"] in [r["run_id"] for r in runs]


@pytest.mark.parametrize("progress", [False, True], ids=["plain", "with-progress"])
def test_generate_sends_the_image_itself_and_its_url(server, progress):
    """Both of Gradio's paths for a queued call: with progress notifications (when asked for) and without."""
    notes: list[str | None] = []

    async def note(done: float, total: float | None, message: str | None) -> None:
        notes.append(message)

    arguments = {"prompt": PROMPT, "steps": 2, "width": 64, "height": 48, "seed": 3}
    result = mcp(
        server, lambda c: c.call_tool("generate", arguments, progress_callback=note if progress else None)
    )
    run = answer(result)
    _, image, link = result.content
    assert (image.type, image.mimeType, link.type) == ("image", "image/png", "text")
    sent = Image.open(io.BytesIO(base64.b64decode(image.data)))
    assert (sent.format, sent.size) == ("PNG", (64, 48))
    url = link.text.removeprefix("Image URL: ")
    assert url.startswith(server.url + "gradio_api/file="), link.text  # not a path on the server's disk
    fetched = Image.open(io.BytesIO(httpx.get(url, timeout=30).raise_for_status().content))
    assert fetched.size == (64, 48) and fetched.tobytes() == sent.convert(fetched.mode).tobytes()
    assert run["status"] == "ok" and isinstance(run["run_id"], int) and bool(notes) == progress


def test_the_tools_as_endpoints_answer_objects(server):
    """The same functions for a gradio_client user: objects (and the PNG), where an agent gets JSON text."""
    client = Client(server.url, verbose=False)
    facts = client.predict(api_name="/mcp_system")
    assert isinstance(facts, dict) and facts == answer(call(server, "system"))
    runs = client.predict(model="tiny-shapes", limit=2, api_name="/mcp_history")
    assert isinstance(runs, list) and all(isinstance(r, dict) for r in runs)
    run, png = client.predict(prompt=PROMPT, steps=2, width=64, height=64, api_name="/mcp_generate")
    assert isinstance(run, dict) and run["status"] == "ok" and Image.open(png).size == (64, 64)


@pytest.mark.parametrize(
    "tool, bad, message",
    [
        ("generate", {"steps": 0}, "steps must be a whole number between 1 and 200"),
        ("generate", {"steps": 2.5}, "steps must be a whole number between 1 and 200, not 2.5."),
        ("generate", {"precision": "int3"}, "precision must be one of fp32, bf16, fp16, not 'int3'."),
        ("generate", {"optimizations": ["warp"]}, "Unknown optimization 'warp'"),
        ("compare", {"configs": "channels_last"}, "configs must be a list of text, e.g. ["),
        ("history", {"limit": "ten"}, "limit must be a whole number between 1 and 5000, not 'ten'."),
    ],
)
def test_bad_input_gets_the_validation_sentence(server, tool, bad, message):
    """The studio's own sentence, as the forms answer it, for arguments the schema would refuse too."""
    arguments = {"prompt": PROMPT, "width": 64, "height": 64} if tool != "history" else {}
    result = call(server, tool, **{**arguments, **bad})
    text = result.content[0].text
    assert result.isError and text.startswith(message) and "valid under" not in text, text


def test_a_bad_history_filter_gets_the_sentence(server):
    result = call(server, "history", status="nope")
    assert result.isError and result.content[0].text.startswith("status must be one of running, ok")


def test_studio_mcp_switches_the_server(monkeypatch):
    monkeypatch.delenv("STUDIO_MCP", raising=False)
    assert launch_kwargs()["mcp_server"] is True
    monkeypatch.setenv("STUDIO_MCP", "0")
    assert launch_kwargs()["mcp_server"] is False


def test_generate_takes_loras_and_names_them_in_its_answer(server):
    """An agent asks for a LoRA by name and scale; the run's record names it with its hash."""
    run = answer(call(server, "generate", prompt=PROMPT, steps=2, width=64, height=64, loras=["night:0.5"]))
    assert [(x["name"], x["scale"]) for x in run["loras"]] == [("night", 0.5)] and len(
        run["loras"][0]["hash"]
    ) == 12
    refused = call(server, "generate", prompt=PROMPT, steps=2, loras=["nowhere:1"])
    assert refused.isError and "There is no LoRA named 'nowhere'" in refused.content[0].text
