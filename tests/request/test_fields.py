"""A request's fields, named once (studio.request.fields): the table, `build_request` by name with the
table's defaults, and the faces' picking of their fields."""

import inspect

import pytest

from studio.errors import ValidationError
from studio.request import FIELD_NAMES, REQUEST_FIELDS, build_request, pick_fields

PROMPT = "a big red circle on the left, on a white background"


def test_build_request_takes_the_tables_fields_by_name_only_with_their_defaults():
    parameters = inspect.signature(build_request).parameters.values()
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in parameters)
    empty = inspect.Parameter.empty
    assert [(p.name, p.default) for p in parameters] == [
        (f.name, empty if f.required else f.default) for f in REQUEST_FIELDS
    ]
    assert [f.name for f in REQUEST_FIELDS if f.required] == ["model", "prompt"]
    assert all(f.doc for f in REQUEST_FIELDS) and len(set(FIELD_NAMES)) == len(FIELD_NAMES)


def test_a_caller_passes_only_what_it_cares_about():
    r = build_request(model="tiny-shapes", prompt=PROMPT)
    assert (r.steps, r.guidance, r.width, r.height) == (20, 6.0, 64, 64), "the model's own"
    assert (r.device, r.optimizations, r.seed, r.negative_prompt, r.batch, r.vae) == (
        "cpu",
        (),
        0,
        "",
        1,
        None,
    )
    with pytest.raises(TypeError, match="positional"):
        build_request("tiny-shapes", "auto", "fp32", [], PROMPT)
    with pytest.raises(TypeError, match="'stpes'"):
        build_request(model="tiny-shapes", prompt=PROMPT, stpes=2)
    with pytest.raises(TypeError, match="'prompt'"):
        build_request(model="tiny-shapes")


def test_precision_is_a_technique_put_first_and_empty_values_mean_the_default():
    r = build_request(model="tiny-shapes", prompt=PROMPT, precision="bf16", optimizations=["channels_last"])
    assert r.optimizations == ("bf16", "channels_last") and r.config_label == "bf16+channels_last"
    assert build_request(model="tiny-shapes", prompt=PROMPT, optimizations="channels_last").optimizations == (
        "channels_last",
    )
    blank = build_request(
        model="tiny-shapes", prompt=PROMPT, device="", scheduler="", batch="", vae="", single_file_config=""
    )
    assert (blank.device, blank.batch, blank.vae) == ("cpu", 1, None)
    with pytest.raises(ValidationError, match="precision must be one of fp32, bf16, fp16, not 'int4'"):
        build_request(model="tiny-shapes", prompt=PROMPT, precision="int4")


def test_settings_come_as_a_mapping_or_as_json():
    as_json = build_request(
        model="tiny-shapes",
        prompt=PROMPT,
        optimizations=["deepcache"],
        settings='{"deepcache": {"interval": 2}}',
    )
    assert as_json.config_label == "deepcache[interval=2]"
    with pytest.raises(ValidationError, match="settings must be a JSON object"):
        build_request(model="tiny-shapes", prompt=PROMPT, settings="{not json")


def test_pick_fields_picks_the_tables_names_in_its_order():
    given = {"warmup": 1, "prompt": PROMPT, "custom_model": "", "model": "tiny-shapes", "steps": 2}
    assert list(pick_fields(given).items()) == [("model", "tiny-shapes"), ("prompt", PROMPT), ("steps", 2)]
