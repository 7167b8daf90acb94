"""Save a diffusers Stable Diffusion pipeline as one original-format (LDM) `.safetensors` checkpoint: the
single files the tests load (`tests/pipelines/test_single_file.py`, the API's single-file test).

The reverse of diffusers' single-file conversion (`diffusers.loaders.single_file_utils`) for an SD-style
UNet, an AutoencoderKL and a CLIP text encoder: the keys become `model.diffusion_model.*`,
`first_stage_model.*` and `cond_stage_model.transformer.*`, the layout A1111, ComfyUI and
`StableDiffusionPipeline.from_single_file` read. Architectures other than the pipeline's defaults load back
with `from_single_file(path, config=<the diffusers folder>)`.

    python -m tests.pipelines.single_file assets/tiny-shapes tiny-shapes.safetensors
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

log = logging.getLogger(__name__)

UNET, VAE, CLIP = "model.diffusion_model.", "first_stage_model.", "cond_stage_model.transformer."
UNET_LAYERS = {
    "time_embedding.linear_1": "time_embed.0",
    "time_embedding.linear_2": "time_embed.2",
    "add_embedding.linear_1": "label_emb.0.0",
    "add_embedding.linear_2": "label_emb.0.2",
    "class_embedding.linear_1": "label_emb.0.0",
    "class_embedding.linear_2": "label_emb.0.2",
    "conv_in": "input_blocks.0.0",
    "conv_norm_out": "out.0",
    "conv_out": "out.2",
}
UNET_RESNET = {
    "norm1": "in_layers.0",
    "conv1": "in_layers.2",
    "norm2": "out_layers.0",
    "conv2": "out_layers.3",
    "time_emb_proj": "emb_layers.1",
    "conv_shortcut": "skip_connection",
}
VAE_LAYERS = {"conv_norm_out": "norm_out"}
VAE_ATTENTION = {"group_norm": "norm", "to_q": "q", "to_k": "k", "to_v": "v", "to_out.0": "proj_out"}
UNET_BLOCKS = {"CrossAttnDownBlock2D", "DownBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"}


def _rename(rest: str, names: dict[str, str]) -> str:
    """`rest` with its leading module renamed by `names` ('conv1.weight' -> 'in_layers.2.weight')."""
    for old, new in names.items():
        if rest.startswith(old + "."):
            return new + rest[len(old) :]
    return rest


def _unet_block(slot: str, kind: str, leaf: list[str]) -> str:
    """A resnet (`.0`) or a transformer (`.1`) of one original input/middle/output block."""
    rest = ".".join(leaf)
    return f"{slot}.0.{_rename(rest, UNET_RESNET)}" if kind == "resnets" else f"{slot}.1.{rest}"


def unet_key(key: str, config: Any) -> str:
    """A diffusers UNet2DConditionModel key -> its original (LDM openaimodel) name, without prefix."""
    per = config["layers_per_block"] + 1  # an original down block: its resnets, then its downsampler
    parts = key.split(".")
    if parts[0] == "down_blocks":
        block, kind = int(parts[1]), parts[2]
        if kind == "downsamplers":  # down_blocks.B.downsamplers.0.conv.weight
            return ".".join([f"input_blocks.{block * per + per}.0.op", *parts[5:]])
        return _unet_block(f"input_blocks.{1 + block * per + int(parts[3])}", kind, parts[4:])
    if parts[0] == "up_blocks":
        block, kind = int(parts[1]), parts[2]
        if kind == "upsamplers":  # after the block's last resnet, and its transformer when it has one
            after = 2 if config["up_block_types"][block].startswith("CrossAttn") else 1
            return ".".join([f"output_blocks.{block * per + per - 1}.{after}.conv", *parts[5:]])
        return _unet_block(f"output_blocks.{block * per + int(parts[3])}", kind, parts[4:])
    if parts[0] == "mid_block":  # resnet 0, transformer, resnet 1
        slot = 2 * int(parts[2]) if parts[1] == "resnets" else 1
        rest = ".".join(parts[3:])
        return f"middle_block.{slot}.{_rename(rest, UNET_RESNET) if parts[1] == 'resnets' else rest}"
    renamed = _rename(key, UNET_LAYERS)
    if renamed == key:
        raise ValueError(f"save_single_file does not know where the UNet weight {key!r} goes.")
    return renamed


def vae_key(key: str, config: Any) -> str:
    """A diffusers AutoencoderKL key -> its original (LDM autoencoder) name, without prefix."""
    parts = key.split(".")
    part = parts[0]
    if part not in {"encoder", "decoder"}:
        return key  # quant_conv, post_quant_conv
    if parts[1] in {"down_blocks", "up_blocks"}:
        stage, block = parts[1].removesuffix("_blocks"), int(parts[2])
        if stage == "up":  # the original decoder counts its up blocks from the lowest resolution
            block = len(config["up_block_types"]) - 1 - block
        if parts[3] in {"downsamplers", "upsamplers"}:  # X_blocks.B.Xsamplers.0.conv.weight
            return ".".join([f"{part}.{stage}.{block}.{stage}sample", *parts[5:]])
        rest = _rename(".".join(parts[5:]), {"conv_shortcut": "nin_shortcut"})
        return f"{part}.{stage}.{block}.block.{parts[4]}.{rest}"
    if parts[1] == "mid_block" and parts[2] == "resnets":
        return ".".join([f"{part}.mid.block_{int(parts[3]) + 1}", *parts[4:]])
    if parts[1] == "mid_block":
        return f"{part}.mid.attn_1.{_rename('.'.join(parts[4:]), VAE_ATTENTION)}"
    return f"{part}.{_rename('.'.join(parts[1:]), VAE_LAYERS)}"


def _check_unet(config: Any) -> None:
    blocks = {*config["down_block_types"], *config["up_block_types"]}
    layers = config["layers_per_block"]
    if (
        not blocks <= UNET_BLOCKS
        or not isinstance(layers, int)
        or config.get("mid_block_type")
        not in (
            None,
            "UNetMidBlock2DCrossAttn",
        )
    ):
        raise ValueError(
            "save_single_file writes Stable Diffusion-style UNets (CrossAttn/plain Down and Up blocks, one "
            f"layers_per_block, a cross-attention mid block), not {sorted(blocks)} with {layers!r} layers."
        )


def original_state_dict(pipe: Any) -> dict[str, torch.Tensor]:
    """The pipeline's UNet, VAE and text encoder weights under their original (LDM) names."""
    if getattr(pipe, "text_encoder_2", None) is not None:
        raise ValueError(
            "save_single_file writes pipelines with one CLIP text encoder (Stable Diffusion 1.x/2.x); "
            f"{type(pipe).__name__} has two."
        )
    _check_unet(pipe.unet.config)
    out: dict[str, torch.Tensor] = {}
    for key, value in pipe.unet.state_dict().items():
        out[UNET + unet_key(key, pipe.unet.config)] = value
    for key, value in pipe.vae.state_dict().items():
        name = vae_key(key, pipe.vae.config)
        if ".mid.attn_1." in name and name.endswith(".weight") and value.ndim == 2:
            value = value[:, :, None, None]  # the original attention projections are 1x1 convolutions
        out[VAE + name] = value
    for key, value in pipe.text_encoder.state_dict().items():
        out[CLIP + (key if key.startswith("text_model.") else "text_model." + key)] = value
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in out.items()}


def save_single_file(pipe_or_folder: Any, path: str | Path) -> Path:
    """Write a Stable Diffusion pipeline (or a local diffusers folder of one) as one original-format
    `.safetensors` checkpoint.

    Args:
        pipe_or_folder: a loaded pipeline, or a local diffusers pipeline folder (safetensors weights).
        path: the file to write; must end in `.safetensors`.

    Returns:
        The path written. Load it with `StableDiffusionPipeline.from_single_file(path, config=<folder>)`.
    """
    path = Path(path)
    if path.suffix != ".safetensors":
        raise ValueError(f"{str(path)!r} must end in .safetensors: the studio writes no pickle checkpoints.")
    pipe = pipe_or_folder
    if isinstance(pipe_or_folder, str | Path):
        from diffusers import StableDiffusionPipeline

        pipe = StableDiffusionPipeline.from_pretrained(
            pipe_or_folder, use_safetensors=True, safety_checker=None, requires_safety_checker=False
        )
    state = original_state_dict(pipe)
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(state, str(path), metadata={"format": "pt", "written_by": "tests.pipelines.single_file"})
    log.info("wrote %d tensors to %s", len(state), path)
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.pipelines.single_file", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "source", help="a local diffusers Stable Diffusion folder, or a registry id (tiny-shapes)"
    )
    parser.add_argument("out", help="the .safetensors file to write")
    args = parser.parse_args(argv)
    from pipelines.registry import SPECS

    spec = SPECS.get(args.source)
    source = spec.source if spec is not None and spec.local and Path(spec.source).is_dir() else args.source
    try:
        print(save_single_file(source, args.out))
    except (OSError, ValueError) as exc:
        parser.exit(2, f"{exc}\n")


if __name__ == "__main__":
    main()
