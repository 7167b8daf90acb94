"""JSON from outside (a form's settings, a client's request, an image's chunk, a hand-edited run log):
`checks.parse_json` checks size and nesting before Python's parser sees the text, so a deeply nested document
is a sentence, not a RecursionError and an "Internal error"."""

from __future__ import annotations

from time import perf_counter

import pytest

from studio import checks
from studio.errors import ValidationError
from tests.faults import cases


def test_a_deeply_nested_document_is_a_sentence_not_a_recursion_error():
    with pytest.raises(ValidationError, match="settings nests 100,000 levels deep; the limit is 32. Send a"):
        checks.parse_json("settings", cases.DEEP)


@pytest.mark.parametrize(
    "text, said",
    [
        (
            "x" * 1_000_001,
            "settings is 1,000,001 characters long; the limit is 1,000,000. Send a shorter one.",
        ),
        ('{"a": ' + "1" * 5000 + "}", "settings is not valid JSON (Exceeds the limit (4300 digits)"),
        ('{"deepcache": {"interval": 2}', "settings is not valid JSON (Expecting ',' delimiter"),
        (b"\xff\xfe{}", "settings is not UTF-8 text, so not JSON. Send JSON text."),
        (7, "settings must be JSON text, not int."),
    ],
    ids=["huge", "long-number", "unclosed", "not-utf8", "not-text"],
)
def test_every_bad_document_is_a_sentence(text, said):
    with pytest.raises(ValidationError) as info:
        checks.parse_json("settings", text)
    assert str(info.value).startswith(said)


def test_brackets_inside_strings_do_not_count_and_good_json_parses():
    text = '{"prompt": "[[[[{{{{ \\" ]]", "settings": {"deepcache": {"interval": 2}}, "list": [[1]]}'
    assert checks.json_depth(text) == 3
    assert checks.parse_json("settings", text, depth=3)["settings"] == {"deepcache": {"interval": 2}}
    with pytest.raises(ValidationError, match="nests 3 levels deep; the limit is 2"):
        checks.parse_json("settings", text, depth=2)


@pytest.mark.parametrize(
    "text",
    ['"\\"' * 300_000, '"' + "\\" * 999_000, "[" * 500_000 + "]" * 499_000, '"' * 999_000],
    ids=["escaped-quotes", "backslashes", "brackets", "quotes"],
)
def test_the_depth_check_takes_linear_time_on_pathological_text(text):
    start = perf_counter()
    with pytest.raises(ValidationError):
        checks.parse_json("settings", text, depth=8)
    assert perf_counter() - start < 1.0


def test_a_request_with_deeply_nested_settings_is_a_sentence(tmp_path):
    outcome = cases.json_case(cases.Workspace(tmp_path), "request settings nested 100,000 deep")
    assert not outcome.said.startswith(cases.CRASH), outcome.said
    assert outcome.said.startswith("settings is 200,000 characters long") and outcome.runs_lost == 0
