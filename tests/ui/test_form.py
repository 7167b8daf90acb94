"""A form's fields by name into a request (studio.ui.handlers.common): the order the endpoints list them in,
the custom model, Generate's technique boxes, and a sweep's baseline."""

from studio.ui.handlers.common import FORM_ORDER, TECHNIQUE_BOXES, form_request, in_form_order

PROMPT = "a big red circle on the left, on a white background"


def test_the_endpoints_list_the_request_fields_in_the_tables_order():
    """/generate's positional order is what clients written before keywords still send."""
    generate = [name for name in FORM_ORDER if name not in TECHNIQUE_BOXES]
    assert generate == [
        "model",
        "custom_model",
        "device",
        "precision",
        "optimizations",
        "prompt",
        "negative_prompt",
        "seed",
        "steps",
        "guidance",
        "width",
        "height",
        "scheduler",
        "settings",
        "batch",
        "vae",
        "single_file_config",
        "loras",  # newer fields come last: a positional client's arguments keep their places
    ]
    given = {"rounds": 1, "steps": 2, "custom_model": "", "model": "tiny-shapes"}
    assert list(in_form_order(given)) == ["model", "custom_model", "steps", "rounds"]


def test_a_custom_model_is_used_over_the_menus():
    req = form_request({"model": "sd15", "custom_model": "  tiny-shapes ", "prompt": PROMPT})
    assert req.model == "tiny-shapes"
    assert form_request({"model": "tiny-shapes", "custom_model": "", "prompt": PROMPT}).model == "tiny-shapes"


def test_generates_ticked_boxes_are_the_techniques_and_the_rest_of_a_form_is_left_out():
    ticked = dict(zip(TECHNIQUE_BOXES, (["channels_last"], ["vae_slicing"], None), strict=True))
    req = form_request({"model": "tiny-shapes", "prompt": PROMPT, "precision": "bf16", **ticked, "rounds": 3})
    assert req.optimizations == ("bf16", "channels_last", "vae_slicing")


def test_a_sweeps_fields_give_its_baseline():
    req = form_request({"model": "tiny-shapes", "prompt": PROMPT, "steps": 2, "presets": ["bf16"]})
    assert (req.config_label, req.negative_prompt, req.steps, req.guidance) == ("baseline", "", 2, 6.0)
