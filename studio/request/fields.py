"""A generation request's fields, named once: `REQUEST_FIELDS` is their order, their types, their defaults
and what each means, and `build_request` takes them by name.

Every face passes the fields it has by name (`build_request(model="tiny-shapes", prompt="a red circle",
steps=2)`); what it leaves out takes the table's default, where None means the model's own. The order is
the API's: the Gradio endpoints list their parameters in it (the browser form adds `custom_model` after
`model`). `build_request`'s keyword-only signature is made from the table, and so are the MCP tools'
request parameters (`studio.ui.mcp_tools`): their types, defaults and the documentation an agent reads.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from studio import checks
from studio.errors import ValidationError
from studio.request.configs import parse_opts
from studio.request.generation import GenerationRequest, _validated, parse_setting_args

PRECISIONS = ("fp32", "bf16", "fp16")
REQUIRED: Any = type("Required", (), {"__repr__": lambda self: "REQUIRED"})()  # a field without a default


@dataclass(frozen=True)
class RequestField:
    """One field of a request: its name, the type a typed face (an MCP tool, a client) gives it, its default
    (`REQUIRED` for none, None for the model's own) and what it means, one sentence for a form's or a tool's
    documentation. `build_request` also takes text for `optimizations` ("bf16+channels_last") and
    `settings` (JSON)."""

    name: str
    annotation: Any
    default: Any
    doc: str

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


_OWN = "empty for the model's own"
REQUEST_FIELDS: tuple[RequestField, ...] = (
    RequestField(
        "model",
        str,
        REQUIRED,
        "A registry model (tiny-shapes: bundled, fast on a CPU; sd15, sdxl, sd-turbo, ...), a hub id, "
        "a local folder or a .safetensors file.",
    ),
    RequestField("device", str, "auto", '"auto", "cpu", "cuda", "cuda:1" or "mps".'),
    RequestField(
        "precision",
        Literal[PRECISIONS],
        "fp32",
        "Weights precision: fp32, bf16 or fp16; bf16 and fp16 are techniques like the others.",
    ),
    RequestField(
        "optimizations",
        list[str] | None,
        (),
        'Technique names to apply, e.g. ["sdpa", "channels_last"]; empty for the baseline.',
    ),
    RequestField("prompt", str, REQUIRED, 'What to draw, e.g. "a big red circle on the left".'),
    RequestField("negative_prompt", str, "", "What not to draw."),
    RequestField("seed", int, 0, "Random seed (-1 for a random one)."),
    RequestField("steps", int | None, None, f"Denoising steps (1-200); {_OWN}."),
    RequestField("guidance", float | None, None, f"Classifier-free guidance scale (0-30); {_OWN}."),
    RequestField("width", int | None, None, f"Image width in pixels, a multiple of 8; {_OWN}."),
    RequestField("height", int | None, None, f"Image height in pixels, a multiple of 8; {_OWN}."),
    RequestField("scheduler", str | None, None, f'A scheduler name such as "ddim" or "euler"; {_OWN}.'),
    RequestField(
        "settings",
        dict[str, dict[str, Any]] | None,
        None,
        'Technique settings, a mapping or its JSON text, e.g. {"deepcache": {"interval": 2}}.',
    ),
    RequestField(
        "batch", int, 1, "Images per prompt in one call (1-8); seconds_per_image and images_per_s report it."
    ),
    RequestField(
        "vae",
        str | None,
        None,
        f"A VAE to swap in: an AutoencoderKL folder, a .safetensors file or a hub id; {_OWN}.",
    ),
    RequestField(
        "single_file_config",
        str | None,
        None,
        "For a .safetensors model: the diffusers folder its configs come from.",
    ),
    RequestField(
        "loras",
        list[str] | None,
        (),
        'LoRAs, each "SOURCE" or "SOURCE:SCALE", e.g. ["night:0.5"]: a name `python -m studio loras` '
        "lists, a .safetensors file or a hub id; <lora:NAME:SCALE> in the prompt does the same.",
    ),
)
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in REQUEST_FIELDS)


def pick_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The request's fields among `values` (a form's or a tool's arguments by name), in the table's order;
    the other names are left out."""
    return {name: values[name] for name in FIELD_NAMES if name in values}


def parse_settings(value: Any) -> dict[str, Any]:
    """Technique settings from the API: a dict or a JSON object string."""
    if value in (None, "", {}):
        return {}
    if isinstance(value, str):
        example = '{"torch_compile": {"mode": "default"}}'
        value = checks.parse_json(
            "settings",
            value,
            limit=100_000,
            depth=8,
            fix=f"settings must be a JSON object such as {example}.",
        )
    if not isinstance(value, dict):
        raise ValidationError("settings must be a JSON object mapping technique names to their settings.")
    return value


def _signature() -> inspect.Signature:
    """`build_request`'s signature: the table's fields, keyword-only, in its order, with its types and
    defaults."""
    return inspect.Signature(
        [
            inspect.Parameter(
                f.name,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=f.annotation,
                **({} if f.required else {"default": f.default}),
            )
            for f in REQUEST_FIELDS
        ],
        return_annotation=GenerationRequest,
    )


def build_request(**fields: Any) -> GenerationRequest:
    """Validate a face's fields, given by name, into a request.

    Its signature is the table's, keyword-only: `build_request(*, model, device="auto", precision="fp32",
    optimizations=(), prompt, ...)` (`inspect.signature(build_request)`). A field left out takes its default;
    an unknown name, a missing model or prompt, or a value given by position is a TypeError, as for any
    keyword-only function. `precision` is a technique like the others, put first among `optimizations` (a
    list of names, or a string of names joined by commas or "+", as `bf16+channels_last`; a precision may
    also stay among them); `settings` is a mapping or a JSON object string; `batch` is the images per prompt
    (the request's `batch`); the others are checked as given, empty for their defaults.
    """
    bound = SIGNATURE.bind(**fields)
    bound.apply_defaults()
    given = dict(bound.arguments)
    precision, names, batch = given.pop("precision"), given.pop("optimizations"), given.pop("batch")
    if precision not in (None, "", *PRECISIONS):
        raise ValidationError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}.")
    optimizations = parse_opts(names) if isinstance(names, str) else list(names or [])
    if precision in ("bf16", "fp16"):
        optimizations.insert(0, precision)
    given.update(device=given["device"] or "auto", settings=parse_settings(given["settings"]))
    return _validated(**given, optimizations=optimizations, batch=1 if batch in (None, "") else batch)


SIGNATURE = _signature()
build_request.__signature__ = SIGNATURE  # help() and inspect show the table's fields


def request_from_args(args: Any, optimizations: Any = (), device: str | None = None) -> GenerationRequest:
    """A request from the command line's arguments (`studio.cli.arguments.request_args`), for the CLI and the
    distributed launcher alike, through `build_request`."""
    return build_request(
        model=args.model,
        prompt=args.prompt,
        negative_prompt=args.negative_prompt,
        seed=args.seed,
        steps=args.steps,
        guidance=args.guidance,
        width=args.width,
        height=args.height,
        scheduler=args.scheduler,
        device=device or args.device,
        optimizations=list(optimizations),
        settings=parse_setting_args(args.setting),
        batch=getattr(args, "batch", 1),
        vae=getattr(args, "vae", None),
        single_file_config=getattr(args, "single_file_config", None),
        loras=getattr(args, "lora", None) or (),
    )
