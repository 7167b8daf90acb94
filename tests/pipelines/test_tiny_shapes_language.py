"""The tiny-shapes prompt language: one token per word, unknown words found and survivable."""

from __future__ import annotations

from pipelines.tiny_shapes import EXAMPLE_PROMPT, language_words, unknown_words
from pipelines.tiny_shapes.tokenizer import build_tokenizer, check_tokenizer


def test_unknown_words_lists_words_outside_the_language():
    assert unknown_words(EXAMPLE_PROMPT) == []
    assert unknown_words("a Red zebra circle, on a tartan background!") == ["zebra", "tartan", "!"]
    assert unknown_words("a small blue star in the center") == []


def test_every_language_word_is_one_token_and_odd_text_does_not_crash(tmp_path):
    tok = build_tokenizer(tmp_path)
    check_tokenizer(tok)
    ids = tok(EXAMPLE_PROMPT).input_ids
    assert len(ids) == len(EXAMPLE_PROMPT.replace(",", " ,").split()) + 2
    assert tok.unk_token_id in tok("ünïcode ☃ 42").input_ids
    assert {"circle", "red", "left", "background", ","} <= set(language_words())
