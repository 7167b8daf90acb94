"""The validation boundary (studio.request.generation): every bad input gets a specific sentence before any
model work."""

import pytest

from studio.errors import ConflictError, UnavailableError, ValidationError
from studio.optimizations.memory import parse_max_memory
from studio.request import build_request, parse_config, parse_opts, with_config


def ok(**kw):
    args = {"model": "tiny-shapes", "prompt": "a big red circle on the left, on a white background"}
    return build_request(**{**args, **kw})


def test_defaults_come_from_the_model_spec():
    r = ok()
    assert (r.width, r.height, r.steps, r.device, r.optimizations, r.dtype_name) == (
        64,
        64,
        20,
        "cpu",
        (),
        "fp32",
    )
    assert r.config_label == "baseline"


def test_config_label_names_the_techniques_in_order_with_the_settings_given():
    assert (
        ok(optimizations=["deepcache", "bf16"], settings={"deepcache": {"interval": 2}}).config_label
        == "bf16+deepcache[interval=2]"
    )
    tome = ok(
        optimizations=["token_merging"], settings={"token_merging": {"ratio": 0.5, "max_downsample": 2}}
    )
    assert tome.config_label == "token_merging[max_downsample=2,ratio=0.5]", "settings sorted by name"
    assert ok(optimizations=["deepcache"]).config_label == "deepcache", "no settings given: the bare name"
    vae = ok(optimizations=["int8_static"], settings={"int8_static": {"vae": "false"}})
    assert vae.config_label == "int8_static[vae=false]", "a boolean as it is typed, not Python's False"
    dropped = ok(optimizations=["bf16"], settings={"deepcache": {"interval": 2}})
    assert dropped.settings == {} and dropped.config_label == "bf16", (
        "settings of a technique not asked for are dropped"
    )


def test_opts_are_ordered_and_deduplicated():
    r = ok(optimizations="jit_trace_unet,bf16+channels_last bf16")
    assert r.optimizations == ("bf16", "channels_last", "jit_trace_unet")
    assert r.dtype_name == "bf16"


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"steps": 0}, "steps must be a whole number between 1 and 200"),
        ({"steps": 10**9}, "steps must be a whole number"),
        ({"steps": 2.5}, "steps must be a whole number"),
        ({"steps": "many"}, "steps must be a whole number"),
        ({"steps": True}, "steps must be a whole number"),
        ({"width": 0}, "width must be a whole number between 8"),
        ({"width": -64}, "width must be a whole number"),
        ({"height": 100_000}, "height must be a whole number"),
        ({"width": 65}, "multiple of 8"),
        ({"guidance": float("nan")}, "guidance must be a finite number"),
        ({"guidance": float("inf")}, "guidance must be a finite number"),
        ({"guidance": "x"}, "guidance must be a number"),
        ({"prompt": ""}, "prompt is empty"),
        ({"prompt": "   "}, "prompt is empty"),
        ({"prompt": "a" * 100_000}, "100000 characters long"),
        ({"prompt": "a red\x00circle"}, "NUL"),
        ({"prompt": 42}, "prompt must be text"),
        ({"negative_prompt": "x\x00"}, "negative prompt contains a NUL"),
        ({"model": "no-such-model"}, "Unknown model 'no-such-model'"),
        ({"model": 3}, "model must be text"),
        ({"optimizations": ["warp_drive"]}, "Unknown optimization 'warp_drive'"),
        ({"optimizations": [1]}, "optimization names must be text"),
        ({"scheduler": "magic"}, "Unknown scheduler 'magic'"),
        ({"seed": -5}, "seed must be a whole number"),
        ({"batch": 99}, "batch must be a whole number between 1 and 8"),
        (
            {"settings": {"torch_compile": {"mode": "ludicrous"}}, "optimizations": ["torch_compile"]},
            "torch_compile mode",
        ),
        ({"settings": {"bf16": {"x": 1}}}, "bf16 settings"),
    ],
)
def test_bad_input_is_refused_with_a_specific_message(kw, message):
    with pytest.raises(ValidationError, match=message):
        ok(**kw)


def test_conflicts_are_refused():
    with pytest.raises(
        ConflictError, match="sdpa and xformers cannot be combined|classic_attention and sdpa"
    ):
        ok(optimizations=["sdpa", "classic_attention"])


def test_unavailable_techniques_are_refused_not_skipped(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UnavailableError, match="cudnn_benchmark needs CUDA"):
        ok(optimizations=["cudnn_benchmark"])
    with pytest.raises(UnavailableError, match="Device 'cuda:0' is not available"):
        ok(device="cuda:0")


def test_random_seed_is_drawn_and_recorded():
    r = ok(seed=-1)
    assert 0 <= r.seed < 2**32


def test_local_directory_outside_allowed_roots_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("STUDIO_MODEL_ROOTS", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValidationError, match="outside the allowed roots"):
        ok(model="/etc")


def test_allowlist(monkeypatch):
    monkeypatch.setenv("STUDIO_MODEL_ALLOWLIST", "tiny-shapes")
    assert ok().model == "tiny-shapes"
    with pytest.raises(ValidationError, match="not in STUDIO_MODEL_ALLOWLIST"):
        ok(model="sd15")


def test_hub_ids_are_accepted_without_loading():
    assert ok(model="someone/some-model", width=512, height=512).spec.source == "someone/some-model"
    with pytest.raises(ValidationError):
        ok(model="../../etc/passwd")


@pytest.mark.parametrize(
    "text, names, settings",
    [
        ("bf16,channels_last jit_trace_unet", ["bf16", "channels_last", "jit_trace_unet"], {}),
        ("baseline", [], {}),
        (
            "openvino[mode=hybrid_int8,inference_precision=auto]+cfg_cutoff[after=0.5]",
            ["openvino", "cfg_cutoff"],
            {
                "openvino": {"mode": "hybrid_int8", "inference_precision": "auto"},
                "cfg_cutoff": {"after": "0.5"},
            },
        ),
    ],
)
def test_a_configuration_is_written_as_results_label_it(text, names, settings):
    assert parse_config(text) == (names, settings)


@pytest.mark.parametrize("text", ["deepcache[interval]", "deepcache]x", "x[[a=1]]", "deepcache[=2]"])
def test_a_malformed_configuration_is_refused_with_an_example(text):
    with pytest.raises(ValidationError, match="setting=value|is not a configuration such as"):
        parse_config(text)


def test_a_configuration_replaces_the_techniques_and_adds_its_settings():
    base = build_request(model="tiny-shapes", prompt="a red circle", optimizations=["deepcache"])
    assert with_config(base, "bf16+deepcache[interval=2]").config_label == "bf16+deepcache[interval=2]"
    with pytest.raises(ValidationError, match="deepcache interval"):
        with_config(base, "deepcache[interval=0]")


def test_parse_helpers():
    assert parse_opts("baseline") == []
    assert parse_max_memory("0=4GB, 1=4GB, cpu=16GB") == {0: "4GB", 1: "4GB", "cpu": "16GB"}
    with pytest.raises(ValidationError, match="max_memory size"):
        parse_max_memory({"0": "lots"})


def test_model_sources_are_checked_at_the_boundary():
    """A VAE and a single-file config folder are checked with the rest of the request (pipelines.sources):
    nothing is loaded here."""
    assert ok().vae is None and ok(vae="  ").vae is None
    assert ok(vae="stabilityai/sd-vae-ft-mse").vae == "stabilityai/sd-vae-ft-mse"
    with pytest.raises(ValidationError, match="vae must be text"):
        ok(vae=5)
    with pytest.raises(ValidationError, match="single_file_config is for a single-file .safetensors model"):
        ok(single_file_config="assets/tiny-shapes")
    with pytest.raises(ValidationError, match=r"is a pickle checkpoint \(.ckpt\)"):
        ok(model="v1-5-pruned-emaonly.ckpt")


def test_a_technique_refused_for_the_model_says_to_change_the_model_and_for_the_device_the_device():

    with pytest.raises(
        UnavailableError, match=r"not on a flux pipeline\)\. Remove it or choose another model\."
    ):
        build_request(model="flux-tiny", prompt="a red circle", optimizations=["channels_last"])
    with pytest.raises(UnavailableError, match=r"needs CUDA.*Remove it or choose another device\."):
        build_request(
            model="tiny-shapes", prompt="a red circle", device="cpu", optimizations=["cudnn_benchmark"]
        )
