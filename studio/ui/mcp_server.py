"""What Gradio's MCP server lists and sends: the form endpoints kept out of the tool list (they stay in the
API), and four narrow fixes to Gradio's `GradioMCPServer` for the Blocks whose form endpoints are hidden (the
tools themselves are `studio.ui.mcp_tools`)."""

import json
from typing import Any

import gradio as gr
from gradio.mcp import GradioMCPServer
from gradio_client import utils as client_utils
from mcp.server import Server

NOT_A_TOOL = "studio-form"  # Gradio's MCP server lists a function only when its `_mcp_type` is "tool"/unset
STUDIO_MCP = "_studio_mcp"  # marks a Blocks that `mcp_fixes` apply to, and GradioMCPServer once they are in


# The API page's header counts every public endpoint, and says "MCP Tools" after that count on its MCP tab
# (Gradio 6.31's `api_count`, the config's public dependencies: 20 here) above the tool list's own count
# ("5 Available MCP Tools", `/gradio_api/mcp/schema`). No server option separates the two: hiding the form
# endpoints from the count would hide them from `gradio_client` too. This script, in the page's head
# (`launch(head=MCP_COUNT_HEAD)`), shows the schema's count in that header on the MCP tab and puts the
# endpoints' count back on the others.
MCP_COUNT_HEAD = """<script>
(() => {
  let tools = null;
  const fix = () => {
    for (const line of document.querySelectorAll(".counts p")) {
      const number = line.querySelector(".url")?.firstChild;
      if (!number || tools === null) continue;
      if (number.studioEndpoints === undefined) number.studioEndpoints = number.nodeValue;
      const shown = /MCP Tool/.test(line.textContent) ? String(tools) : number.studioEndpoints;
      if (number.nodeValue !== shown) number.nodeValue = shown;
    }
  };
  fetch(new URL("gradio_api/mcp/schema", document.baseURI))
    .then((answer) => (answer.ok ? answer.json() : null))
    .then((schema) => {
      if (!Array.isArray(schema)) return;
      tools = schema.length;
      fix();
      new MutationObserver(fix).observe(document.body, {childList: true, subtree: true, characterData: true});
    });
})();
</script>"""


def json_text(data: Any) -> str:
    """An answer as JSON text (an agent's; Gradio's MCP server would write a dict with Python's str())."""
    return json.dumps(data, default=str, ensure_ascii=False)


def hide_form_endpoints(demo: gr.Blocks, tools: dict[str, Any]) -> None:
    """Keep the form endpoints (`/generate`, `/compare`, ...) out of the MCP tools; the API keeps them.

    Gradio 6.31 has no per-event MCP switch (`api_visibility` would hide them from `gradio_client` too): it
    marks the functions (`_mcp_type`, which `gr.resource`/`gr.prompt` set and list_tools reads) and turns
    on `mcp_fixes` for this Blocks. tests/ui/test_mcp.py checks the tool list and the schema.
    """
    keep = set(map(id, tools.values()))
    for block_fn in demo.fns.values():
        if block_fn.fn is not None and block_fn.api_visibility == "public" and id(block_fn.fn) not in keep:
            block_fn.fn._mcp_type = NOT_A_TOOL
    setattr(demo, STUDIO_MCP, True)
    mcp_fixes()


class ArgumentsCheckedByTheStudio(Server):
    """The `mcp` package's server without its JSON-schema check of a tool's arguments: the tool answers a bad
    argument with the studio's sentence ("steps must be a whole number between 1 and 200, ...") where the
    schema check would answer "2.5 is not valid under any of the given schemas". Every tool checks its
    arguments itself, through `studio.request`, as the forms do."""

    def call_tool(self, *, validate_input: bool = True) -> Any:
        return super().call_tool(validate_input=False)


def mcp_fixes() -> None:
    """Four narrow changes to Gradio 6.31's `GradioMCPServer` (pinned), installed once, for the Blocks that
    `hide_form_endpoints` marked (other apps' servers behave as before):
    - `create_mcp_server` builds an `ArgumentsCheckedByTheStudio`: bad arguments reach the tool's own
      validation, whose sentence the agent then gets.
    - `get_tool_to_endpoint` maps every public endpoint to a tool (`generate_1`, `_lambda_`, ...); call_tool,
      list_tools and `/gradio_api/mcp/schema` (which the page's API/MCP view lists, ignoring `_mcp_type`)
      all read that map: the marked functions leave it.
    - `_execute_tool_without_progress` (a queued call whose client asks for no progress) wraps the result
      in a list, so two outputs became one tuple's str(): they are spread, as the progress path has them.
    - `postprocess_output_data` writes an output that is no file with str(), a dict as Python's repr: a dict
      or a list is written as JSON.
    """
    if getattr(GradioMCPServer, STUDIO_MCP, False):
        return
    create = GradioMCPServer.create_mcp_server
    tool_map = GradioMCPServer.get_tool_to_endpoint
    without_progress = GradioMCPServer._execute_tool_without_progress
    to_content = GradioMCPServer.postprocess_output_data

    def create_mcp_server(self: GradioMCPServer) -> Any:
        if _ours(self):
            self.Server = ArgumentsCheckedByTheStudio  # what Gradio builds its server from, for this app
        return create(self)

    def get_tool_to_endpoint(self: GradioMCPServer) -> dict[str, str]:
        return {tool: name for tool, name in tool_map(self).items() if not _a_form(self, name)}

    async def execute_tool_without_progress(self: GradioMCPServer, job: Any) -> list[Any]:
        outputs = await without_progress(self, job)
        return list(outputs[0]) if _ours(self) and isinstance(outputs[0], tuple) else outputs

    def postprocess_output_data(self: GradioMCPServer, data: Any, root_url: str) -> list[Any]:
        data = [json_text(d) if _ours(self) and _an_object(d) else d for d in data]
        return to_content(self, data, root_url)

    GradioMCPServer.create_mcp_server = create_mcp_server
    GradioMCPServer.get_tool_to_endpoint = get_tool_to_endpoint
    GradioMCPServer._execute_tool_without_progress = execute_tool_without_progress
    GradioMCPServer.postprocess_output_data = postprocess_output_data
    setattr(GradioMCPServer, STUDIO_MCP, True)


def _ours(server: GradioMCPServer) -> bool:
    return getattr(server.blocks, STUDIO_MCP, False)  # a Blocks that `hide_form_endpoints` marked


def _a_form(server: GradioMCPServer, endpoint: str) -> bool:
    block_fn = server.get_block_fn_from_endpoint_name(endpoint)
    return getattr(getattr(block_fn, "fn", None), "_mcp_type", None) == NOT_A_TOOL


def _an_object(output: Any) -> bool:  # a file stays a file: Gradio sends it as image content and its URL
    return isinstance(output, dict | list) and not client_utils.is_file_obj_with_meta(output)
