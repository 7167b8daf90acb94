"""Write the tiny-shapes pipeline directory.

``python -m pipelines.tiny_shapes.build --random`` writes the final architecture with
deterministic random weights (seeded); ``pipelines.tiny_shapes.train`` overwrites it with
trained weights through :func:`save_trained`.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
from pathlib import Path

import torch
from diffusers import AutoencoderKL, StableDiffusionPipeline, UNet2DConditionModel
from transformers import CLIPTextModel, CLIPTokenizer

from . import ASSET_DIR, models
from .tokenizer import build_tokenizer, check_tokenizer, piece_token_ids, write_bpe_files

logger = logging.getLogger(__name__)


def make_tokenizer() -> CLIPTokenizer:
    """Build the language tokenizer in a temporary folder and check it."""
    with tempfile.TemporaryDirectory() as tmp:
        tok = build_tokenizer(tmp)
    check_tokenizer(tok)
    return tok


def tie_piece_embeddings(text_encoder: CLIPTextModel, tokenizer: CLIPTokenizer) -> None:
    """Give every non-word piece the UNK embedding, so unknown words all read as UNK."""
    table = text_encoder.get_input_embeddings().weight
    with torch.no_grad():
        table[piece_token_ids(tokenizer)] = table[tokenizer.unk_token_id].clone()


def save_trained(
    vae: AutoencoderKL,
    text_encoder: CLIPTextModel,
    tokenizer: CLIPTokenizer,
    unet: UNet2DConditionModel,
    out_dir: str | Path = ASSET_DIR,
) -> StableDiffusionPipeline:
    """Assemble the components, tie the piece embeddings and save as safetensors."""
    tie_piece_embeddings(text_encoder, tokenizer)
    pipe = models.assemble(vae, text_encoder, tokenizer, unet)
    models.save_pipeline(pipe, out_dir)
    write_bpe_files(Path(out_dir) / "tokenizer")
    return pipe


def build_random(out_dir: str | Path = ASSET_DIR, seed: int = 0) -> StableDiffusionPipeline:
    """Write the architecture with seeded random weights (identical on every run)."""
    torch.manual_seed(seed)
    tok = make_tokenizer()
    vae = models.make_vae(scaling_factor=1.0)
    text_encoder = models.make_text_encoder(tok)
    unet = models.make_unet()
    for name, module in (("vae", vae), ("text_encoder", text_encoder), ("unet", unet)):
        logger.info("%s: %d parameters", name, models.count_params(module))
    return save_trained(vae, text_encoder, tok, unet, out_dir)


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--random", action="store_true", help="write seeded random weights")
    parser.add_argument("--out", type=Path, default=ASSET_DIR)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    if not args.random:
        parser.error("only --random is built here; train with python -m pipelines.tiny_shapes.train")
    build_random(args.out, args.seed)


if __name__ == "__main__":
    main()
