"""A CLIP tokenizer whose vocabulary is exactly the prompt language, one token per word.

The BPE merges are learned on the word list itself (plain BPE: merge the most frequent
pair, repeat), so every known word encodes to a single token. Every lower-case letter is in
the vocabulary too, so an unknown word never crashes: it becomes letter pieces, and any
character outside a-z becomes ``<|unknown|>``. (transformers 5 rebuilds CLIPTokenizer's
normalizer on load, so a word-to-UNK rule cannot be persisted in tokenizer.json.) The text
encoder gives every piece that is not a whole word the UNK embedding, and training inserts
UNK tokens at random, so unknown words are ignored. :func:`unknown_words` lists them so the
UI can warn.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from transformers import CLIPTokenizer

from .language import language_words

BOS = "<|startoftext|>"
EOS = "<|endoftext|>"
UNK = "<|unknown|>"
MODEL_MAX_LENGTH = 24
EOW = "</w>"


def learn_merges(words: list[str]) -> list[tuple[str, str]]:
    """Plain BPE on ``words`` until each one is a single symbol; ties broken alphabetically."""
    segs = [list(w[:-1]) + [w[-1] + EOW] for w in words]
    merges: list[tuple[str, str]] = []
    while True:
        pairs: Counter[tuple[str, str]] = Counter()
        for seg in segs:
            pairs.update(zip(seg, seg[1:], strict=False))
        if not pairs:
            return merges
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        segs = [_apply_merge(seg, best) for seg in segs]


def _apply_merge(seg: list[str], pair: tuple[str, str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(seg):
        if i + 1 < len(seg) and (seg[i], seg[i + 1]) == pair:
            out.append(seg[i] + seg[i + 1])
            i += 2
        else:
            out.append(seg[i])
            i += 1
    return out


def build_vocab(words: list[str], merges: list[tuple[str, str]]) -> dict[str, int]:
    """Special tokens, then every letter and base symbol, then every merge product."""
    tokens = [BOS, EOS, UNK]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    base = letters + [c + EOW for c in letters]
    for w in words:
        base += list(w[:-1]) + [w[-1] + EOW]
    for sym in base:
        if sym not in tokens:
            tokens.append(sym)
    for a, b in merges:
        if a + b not in tokens:
            tokens.append(a + b)
    return {tok: i for i, tok in enumerate(tokens)}


def write_bpe_files(out_dir: str | Path) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Write vocab.json and merges.txt (the classic CLIP files) to ``out_dir``; return both."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    words = language_words()
    merges = learn_merges(words)
    vocab = build_vocab(words, merges)
    (out / "vocab.json").write_text(json.dumps(vocab, indent=1), encoding="utf-8")
    merge_lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in merges]
    (out / "merges.txt").write_text("\n".join(merge_lines) + "\n", encoding="utf-8")
    return vocab, merges


def build_tokenizer(out_dir: str | Path) -> CLIPTokenizer:
    """Write vocab.json, merges.txt and tokenizer.json to ``out_dir`` and return the tokenizer."""
    out = Path(out_dir)
    vocab, merges = write_bpe_files(out)
    tok = CLIPTokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=UNK,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=EOS,
        model_max_length=MODEL_MAX_LENGTH,
    )
    tok.save_pretrained(out)
    return CLIPTokenizer.from_pretrained(out)


def word_token_ids(tok: CLIPTokenizer) -> list[int]:
    """Ids of the whole words of the language (each word is one token)."""
    return [tok.convert_tokens_to_ids(w + EOW) for w in language_words()]


def piece_token_ids(tok: CLIPTokenizer) -> list[int]:
    """Ids of every token that is neither special nor a whole word: pieces of unknown words."""
    keep = set(word_token_ids(tok)) | {tok.bos_token_id, tok.eos_token_id, tok.unk_token_id}
    return [i for i in range(len(tok)) if i not in keep]


def check_tokenizer(tok: CLIPTokenizer) -> None:
    """Raise ValueError unless every language word is one token and odd text does not crash."""
    for word in language_words():
        ids = tok(word, add_special_tokens=False).input_ids
        if len(ids) != 1 or ids[0] == tok.unk_token_id:
            raise ValueError(f"Word {word!r} encodes to {ids}; rebuild the tokenizer.")
    ids = tok("a red Zébra-circle 42!", add_special_tokens=False).input_ids
    if tok.unk_token_id not in ids:
        raise ValueError(f"Characters outside the vocabulary did not map to UNK: {ids}.")
