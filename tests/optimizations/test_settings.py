"""Technique settings (studio.optimizations.base.Settings and each technique's own): a bad value is refused
with a sentence naming the technique, the setting and what it may be; good values are normalised, and the
settings of techniques not requested are checked, then dropped; every entry declares a default for each of its
settings."""

from __future__ import annotations

import importlib.util

import pytest

from studio.errors import ValidationError
from studio.optimizations import REGISTRY
from studio.optimizations.runtime import max_threads, physical_cores
from tests.tiny import MODULES
from tests.tiny import technique_request as request


@pytest.mark.parametrize(
    "settings, message",
    [
        (
            {"threads": {"num_threads": 0}},
            f"threads num_threads must be a whole number between 1 and {max_threads()}",
        ),
        ({"threads": {"num_threads": max_threads() + 1}}, "threads num_threads must be a whole number"),
        ({"threads": {"num_threads": "many"}}, "threads num_threads must be a whole number"),
        ({"deepcache": {"interval": 0}}, "deepcache interval must be a whole number between 1 and 10"),
        ({"deepcache": {"interval": 2.5}}, "deepcache interval must be a whole number"),
        ({"deepcache": {"branch": -1}}, "deepcache branch must be a whole number between 0 and 3"),
        (
            {"deepcache": {"depth": 1}},
            "deepcache settings must be a mapping with keys from: interval, branch",
        ),
        (
            {"token_merging": {"ratio": 0.8}},
            "token_merging ratio must be a finite number between 0.0 and 0.75",
        ),
        ({"token_merging": {"ratio": "half"}}, "token_merging ratio must be a number"),
        ({"token_merging": {"max_downsample": 3}}, "token_merging max_downsample must be one of 1, 2, 4, 8"),
        ({"torch_compile": {"regional": "maybe"}}, "torch_compile regional must be true or false"),
        (
            {"torch_compile": {"mode": "ludicrous"}},
            "torch_compile mode must be one of default, reduce-overhead",
        ),
        (
            {"torch_compile": {"dynamic": "sometimes"}},
            "torch_compile dynamic must be one of auto, true, false",
        ),
        ({"torch_compile": {"freezing": "yes please"}}, "torch_compile freezing must be true or false"),
        ({"torch_compile": {"cpp_wrapper": 2}}, "torch_compile cpp_wrapper must be true or false"),
        ({"int8_dynamic": {"bits": 4}}, "int8_dynamic settings must be a mapping with keys from: none"),
        ({"fused_qkv": {"x": 1}}, "fused_qkv settings must be a mapping with keys from: none"),
    ],
)
def test_bad_settings_are_refused_with_a_sentence(settings, message):
    optimizations = [n for n in settings if importlib.util.find_spec(MODULES.get(n, "torch")) is not None]
    with pytest.raises(ValidationError, match=message):
        request(optimizations, settings=settings)


def test_good_settings_are_normalised():
    r = request(["torch_compile"], settings={"torch_compile": {"mode": "max-autotune", "regional": "true"}})
    assert r.settings["torch_compile"] == {"mode": "max-autotune", "regional": True}
    r = request(
        ["torch_compile"],
        settings={"torch_compile": {"dynamic": "False", "freezing": "yes", "cpp_wrapper": "0"}},
    )
    assert r.settings["torch_compile"] == {"dynamic": "false", "freezing": True, "cpp_wrapper": False}
    r = request(
        ["threads", "deepcache"], settings={"threads": {"num_threads": "1"}, "deepcache": {"interval": "2"}}
    )
    assert r.settings == {"threads": {"num_threads": 1}, "deepcache": {"interval": 2}}
    r = request([], settings={"token_merging": {"ratio": "0.25", "max_downsample": "2"}})
    assert r.settings == {}, "settings of techniques not requested are checked, then dropped"


def test_new_entries_declare_defaults_for_every_setting():
    assert REGISTRY["threads"].defaults == {"num_threads": physical_cores()}
    assert REGISTRY["deepcache"].defaults == {"interval": 3, "branch": 0}
    assert REGISTRY["token_merging"].defaults == {"ratio": 0.5, "max_downsample": 1}
    assert REGISTRY["torch_compile"].defaults == {
        "mode": "default",
        "regional": False,
        "dynamic": "auto",
        "freezing": False,
        "cpp_wrapper": False,
        "tuning": "default",
    }
    assert REGISTRY["fp8"].defaults == {"granularity": "tensor"}
    assert REGISTRY["threads"].stage == "call" and REGISTRY["int8_dynamic"].reversible
