"""Training prompts as token ids: attribute dropout, classifier-free-guidance dropout, UNK noise."""

from __future__ import annotations

import random

import torch
from transformers import CLIPTokenizer

from .dataset import ShapeSpec, training_prompt

UNCOND_PROB = 0.1  # empty prompt, so classifier-free guidance has an unconditional model
UNK_PROB = 0.1  # insert one UNK token, so unknown words in user prompts are ignored


class PromptSampler:
    """Turns dataset indices into token-id batches, with its own seeded RNG (saved in checkpoints)."""

    def __init__(self, tokenizer: CLIPTokenizer, specs: list[ShapeSpec], seed: int) -> None:
        self.tokenizer = tokenizer
        self.specs = specs
        self.rng = random.Random(seed + 1)

    def text(self, index: int) -> str:
        """The prompt for one sample ('' for the unconditional share)."""
        if self.rng.random() < UNCOND_PROB:
            return ""
        return training_prompt(self.specs[index], self.rng)

    def batch(self, indices: list[int]) -> torch.Tensor:
        """Token ids (N, model_max_length), padded with EOS like the pipeline does."""
        tok = self.tokenizer
        rows = tok(
            [self.text(i) for i in indices],
            padding="max_length",
            max_length=tok.model_max_length,
            truncation=True,
        ).input_ids
        return torch.tensor([self._maybe_insert_unk(r) for r in rows])

    def _maybe_insert_unk(self, ids: list[int]) -> list[int]:
        if self.rng.random() >= UNK_PROB:
            return ids
        end = ids.index(self.tokenizer.eos_token_id)
        pos = self.rng.randint(1, end)
        return (ids[:pos] + [self.tokenizer.unk_token_id] + ids[pos:])[: len(ids)]
