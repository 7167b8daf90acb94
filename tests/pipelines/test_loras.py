"""LoRA files as users bring them: the names and scales a request or a prompt gives, the files in the LoRA
folders, a path or a hub id, what each file holds (read from its header) and every refusal's sentence, and
the cache of their tensors. The files are made here: by PEFT on the bundled model's UNet and text encoder,
written by diffusers' own `save_lora_weights`, and in kohya's names; diffusers loads them back."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from types import SimpleNamespace

import huggingface_hub
import pytest
import torch
from diffusers import StableDiffusionPipeline
from diffusers.utils import convert_state_dict_to_diffusers
from huggingface_hub import constants
from huggingface_hub.errors import LocalEntryNotFoundError, RemoteEntryNotFoundError, RepositoryNotFoundError
from peft import LoraConfig, inject_adapter_in_model
from peft.utils import get_peft_model_state_dict
from safetensors.torch import load_file, save_file
from transformers import CLIPTextModel

from pipelines import loras
from pipelines.errors import ValidationError
from pipelines.lora_files import describe
from pipelines.loras import LoraCache, LoraRef, fits, inspect_lora, parse_lora, parse_loras, resolve_lora
from pipelines.sources import ASSETS, read_header
from pipelines.tiny_shapes.models import make_unet

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = ASSETS / "tiny-shapes"
ATTN = "down_blocks.0.attentions.0.transformer_blocks.0"


def _peft_layers(model: torch.nn.Module, targets: list[str], rank: int = 4) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    config = LoraConfig(r=rank, lora_alpha=rank, target_modules=targets, init_lora_weights=False)
    return get_peft_model_state_dict(inject_adapter_in_model(config, model))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """LoRA files of the bundled model in each layout: diffusers' (PEFT's lora_A/lora_B names, and the
    lora.down/lora.up names its training scripts convert to, with the text encoder), kohya's, PEFT's own."""
    folder = tmp_path_factory.mktemp("made")
    unet = _peft_layers(make_unet(), ["to_q", "to_k", "to_v", "to_out.0"])
    text = _peft_layers(CLIPTextModel.from_pretrained(TINY / "text_encoder"), ["q_proj", "v_proj"], rank=2)
    StableDiffusionPipeline.save_lora_weights(
        folder / "peft_names", unet_lora_layers=unet, weight_name="peft_names.safetensors"
    )
    StableDiffusionPipeline.save_lora_weights(
        folder / "down_up",
        unet_lora_layers=convert_state_dict_to_diffusers(unet),
        text_encoder_lora_layers=convert_state_dict_to_diffusers(text),
    )
    kohya = {}
    for key, tensor in unet.items():
        module, _, which = key.removesuffix(".weight").rpartition(".")
        name = "lora_unet_" + module.replace(".", "_")
        kohya[f"{name}.{'lora_down' if which == 'lora_A' else 'lora_up'}.weight"] = tensor.contiguous()
        kohya[f"{name}.alpha"] = torch.tensor(4.0)
    save_file(kohya, folder / "kohya.safetensors")
    save_file({f"base_model.model.{k}": v.contiguous() for k, v in unet.items()}, folder / "peft.safetensors")
    return {
        "peft_names": folder / "peft_names" / "peft_names.safetensors",
        "diffusers": folder / "down_up" / "pytorch_lora_weights.safetensors",
        "kohya": folder / "kohya.safetensors",
        "peft": folder / "peft.safetensors",
    }


@pytest.fixture
def roots(tmp_path, monkeypatch, made):
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", os.pathsep.join([str(tmp_path), str(made["kohya"].parent)]))
    return tmp_path


def write(path, shapes: dict[str, list[int]]):
    """A safetensors file of zeros of these names and shapes (fp16)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: torch.zeros(s, dtype=torch.float16) for k, s in shapes.items()}, path)
    return path


def pair(module: str, rank: int, inputs: int, outputs: int, down=".lora_A.weight", up=".lora_B.weight"):
    return {module + down: [rank, inputs], module + up: [outputs, rank]}


KOHYA = (".lora_down.weight", ".lora_up.weight")


# Parsing what a request and a prompt say


def test_a_source_takes_its_scale_after_the_last_colon_when_it_is_a_number():
    assert parse_lora("night") == LoraRef("night", 1.0)
    assert parse_lora(" night : 0.5 ") == LoraRef("night", 0.5)
    assert parse_lora("owner/name:0.8") == LoraRef("owner/name", 0.8)
    assert parse_lora("path/to/x.safetensors:-1.5") == LoraRef("path/to/x.safetensors", -1.5)
    assert parse_lora("a:b") == LoraRef("a:b", 1.0)
    assert parse_lora("a:b:0.25") == LoraRef("a:b", 0.25)
    assert parse_lora("x:1e1") == LoraRef("x", 10.0)


@pytest.mark.parametrize("text", ["x:nan", "x:inf", "x:10.5", "x:-11"])
def test_a_scale_that_is_not_finite_or_past_ten_is_refused(text):
    with pytest.raises(
        ValidationError, match=r"^The scale of LoRA 'x' must be a finite number from -10 to 10"
    ):
        parse_lora(text)


def test_a_scale_without_a_source_is_refused():
    with pytest.raises(ValidationError, match="needs a source before its scale"):
        parse_lora(":0.5")


def test_the_ways_a_request_lists_loras():
    assert parse_loras(None) == parse_loras("") == parse_loras([]) == ()
    both = (LoraRef("a", 0.5), LoraRef("owner/b", 1.0), LoraRef("c", 2.0))
    assert parse_loras("a:0.5, owner/b\nc:2") == both
    assert parse_loras(["a:0.5", {"source": "owner/b"}, {"name": "c", "scale": 2}]) == both
    assert parse_loras([LoraRef("a", 0.5), "owner/b", "c:2"]) == both
    assert parse_loras({"name": "c:2"}) == (LoraRef("c", 2.0),)


@pytest.mark.parametrize(
    ("values", "sentence"),
    [
        ([f"l{i}" for i in range(9)], r"^At most 8 LoRAs go on one model at once; 9 were given\.$"),
        ("a:0.5, b, a:1", r"^LoRA 'a' is named twice; give it once, with the scale you want\.$"),
        ([{"source": "a", "weight": 1}], r"^A LoRA given as an object takes a 'source' \(or 'name'\)"),
        ([{"source": "a", "scale": "much"}], r"^The scale of LoRA 'a' must be a number, like 0\.8"),
        ([{"source": "a", "scale": True}], r"^The scale of LoRA 'a' must be a finite number"),
        ([3], r"^A LoRA is given as text \(SOURCE or SOURCE:SCALE\), not 3\.$"),
        (42, r"^loras must be a list of SOURCE:SCALE texts, not 42\.$"),
    ],
)
def test_a_list_past_the_limit_a_source_twice_and_odd_items_are_refused(values, sentence):
    with pytest.raises(ValidationError, match=sentence):
        parse_loras(values)


def test_a1111_tags_are_taken_out_of_the_prompt():
    prompt, refs = loras.loras_in_prompt("a cat, <lora:night:0.5>, on grass <lyco:ink>")
    assert prompt == "a cat, on grass"
    assert refs == (LoraRef("night", 0.5), LoraRef("ink", 1.0))
    prompt, refs = loras.loras_in_prompt("<LoRA:style/ink:0.3:0.8>  a dog ,  <lora:x:unet=0.6:te=0.2>")
    assert prompt == "a dog"
    assert refs == (LoraRef("style/ink", 0.8, 0.3), LoraRef("x", 0.6, 0.2))
    assert loras.loras_in_prompt("<lora:y:te=0.4>")[1] == (LoraRef("y", 0.4),)  # the UNet follows te


def test_a_prompt_without_tags_comes_back_unchanged():
    prompt = "  a cat,, with <hypernet:z:1> and  spaces "
    assert loras.loras_in_prompt(prompt) == (prompt, ())


@pytest.mark.parametrize(
    ("prompt", "sentence"),
    [
        (
            "a <lora:x:lots>",
            r"^The scale of the tag '<lora:x:lots>' must be a number, like 0\.8; got 'lots'\.$",
        ),
        ("a <lora::0.5>", r"^The tag '<lora::0\.5>' names no LoRA: write <lora:NAME> or <lora:NAME:0\.8>\.$"),
        ("<lora:x:0.5> b <lora:x:1>", r"^LoRA 'x' is named twice"),
        ("".join(f"<lora:l{i}>" for i in range(9)), r"^At most 8 LoRAs"),
        (
            "<lora:x:20>",
            r"^The scale of the tag '<lora:x:20>' must be a finite number from -10 to 10: '20'\.$",
        ),
    ],
)
def test_a_bad_tag_is_refused_with_a_sentence(prompt, sentence):
    with pytest.raises(ValidationError, match=sentence):
        loras.loras_in_prompt(prompt)


# What a file holds


def test_the_bundled_models_loras_in_each_layout(made, roots):
    expected = {  # (layout, rank, modules, adapts the text encoder)
        "peft_names": ("diffusers", 4, 56, False),
        "diffusers": ("diffusers", 4, 56 + 4, True),
        "kohya": ("kohya", 4, 56, False),
        "peft": ("peft", 4, 56, False),
    }
    for name, path in made.items():
        lora = inspect_lora(path)
        assert (lora.layout, lora.rank, lora.layers, lora.text_encoder) == expected[name], name
        assert (lora.base, lora.family, lora.cross_attention_dim) == ("tiny-shapes", "sd", 64), name
        assert lora.name == path.stem and lora.path == path.resolve() and lora.size == path.stat().st_size


def test_the_hash_is_a1111s_addnet_hash_of_the_data_after_the_header(made, roots):
    data = made["kohya"].read_bytes()
    after = data[8 + int.from_bytes(data[:8], "little") :]
    lora = inspect_lora(made["kohya"])
    assert lora.hash == hashlib.sha256(after).hexdigest()[:12]
    assert loras.short_hash(made["kohya"]) == lora.hash and len(lora.hash) == 12


def test_a_rewritten_file_is_hashed_again(roots):
    path = write(roots / "h.safetensors", pair("unet.a", 4, 64, 64))
    first = inspect_lora(path).hash
    save_file({"unet.a.lora_A.weight": torch.ones(4, 64, dtype=torch.float16)}, path)  # the same size
    os.utime(path, ns=(1, 1))
    assert inspect_lora(path).hash != first


@pytest.mark.parametrize(
    ("shapes", "base", "family", "layout"),
    [
        (
            pair("lora_unet_" + ATTN.replace(".", "_") + "_attn2_to_k", 8, 768, 320, *KOHYA),
            "sd15",
            "sd",
            "kohya",
        ),
        (pair(f"unet.{ATTN}.attn2.to_v", 4, 1024, 320), "sd2", "sd", "diffusers"),
        (
            pair(f"unet.{ATTN}.attn2.processor.to_k_lora", 4, 768, 320, ".down.weight", ".up.weight"),
            "sd15",
            "sd",
            "diffusers",
        ),
        (
            pair("unet.down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k", 4, 2048, 640),
            "sdxl",
            "sdxl",
            "diffusers",
        ),
        (
            pair("lora_te2_text_model_encoder_layers_0_self_attn_q_proj", 4, 1280, 1280, *KOHYA),
            "sdxl",
            "sdxl",
            "kohya",
        ),
        (
            pair("lora_te_text_model_encoder_layers_0_self_attn_q_proj", 4, 1024, 1024, *KOHYA),
            "sd2",
            "sd",
            "kohya",
        ),
        (pair("transformer.transformer_blocks.0.attn.to_q", 4, 1536, 1536), "sd3", "sd3", "diffusers"),
        (pair("lora_unet_joint_blocks_0_x_block_attn_qkv", 4, 1536, 4608, *KOHYA), "sd3", "sd3", "kohya"),
        (
            pair("transformer.single_transformer_blocks.0.attn.to_q", 4, 3072, 3072),
            "flux",
            "flux",
            "diffusers",
        ),
        (pair("transformer.transformer_blocks.0.attn.to_q", 4, 3072, 3072), "flux", "flux", "diffusers"),
        (pair("lora_unet_double_blocks_0_img_attn_qkv", 4, 3072, 9216, *KOHYA), "flux", "flux", "kohya"),
        (pair("diffusion_model.double_blocks.0.img_attn.qkv", 4, 3072, 9216), "flux", "flux", "other"),
        (pair(f"unet.{ATTN}.attn1.to_q", 4, 320, 320), "unknown", "unknown", "diffusers"),
    ],
)
def test_the_base_is_read_from_the_names_and_shapes(tmp_path, shapes, base, family, layout):
    path = write(tmp_path / "x.safetensors", shapes)
    lora = describe(path, read_header(path))
    assert (lora.base, lora.family, lora.layout) == (base, family, layout)


def test_whether_a_lora_fits_a_model(tmp_path):
    sdxl = write(
        tmp_path / "xl.safetensors",
        pair("unet.down_blocks.1.attentions.0.transformer_blocks.0.attn2.to_k", 4, 2048, 640),
    )
    tiny = write(tmp_path / "tiny.safetensors", pair(f"unet.{ATTN}.attn2.to_k", 4, 64, 48))
    sdxl, tiny = (describe(p, read_header(p)) for p in (sdxl, tiny))
    assert fits(sdxl, "sd", 768) == (
        "LoRA 'xl' was trained for SDXL; this model is Stable Diffusion 1.5-like (cross-attention 768): "
        "choose a LoRA made for it."
    )
    assert fits(tiny, "sd", 768) == (
        "LoRA 'tiny' was trained for the bundled Tiny Shapes model; this model is Stable Diffusion 1.5-like "
        "(cross-attention 768): choose a LoRA made for it."
    )
    assert fits(tiny, "flux", None) == (
        "LoRA 'tiny' was trained for the bundled Tiny Shapes model; this model is FLUX.1: choose a LoRA made "
        "for it."
    )
    assert fits(tiny, "sd", 64) is fits(tiny, "sd", None) is fits(sdxl, "sdxl", 2048) is None
    text_only = write(
        tmp_path / "te.safetensors",
        pair("lora_te_text_model_encoder_layers_0_self_attn_q_proj", 4, 768, 768, *KOHYA),
    )
    assert fits(describe(text_only, read_header(text_only)), "sd", 64) == (
        "LoRA 'te' was trained for Stable Diffusion 1.5; this model is Tiny Shapes-like (cross-attention "
        "64): choose a LoRA made for it."
    )
    assert fits(sdxl, "other", None) is None  # a hub model of no known family: diffusers decides


# Refusals, each before any tensor is read


def test_a_pickle_is_refused_by_its_suffix_before_any_lookup(tmp_path):
    for call in (
        lambda: inspect_lora(tmp_path / "x.ckpt"),
        lambda: resolve_lora("owner/name/x.pt", [tmp_path]),
    ):
        with pytest.raises(
            ValidationError, match=r"^LoRA '.*x\.(ckpt|pt)' is a pickle checkpoint \(\.(ckpt|pt)\)"
        ):
            call()


def test_a_file_outside_the_roots_is_refused(made, tmp_path, monkeypatch):
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(tmp_path))
    with pytest.raises(
        ValidationError, match=r"^LoRA file '.*kohya\.safetensors' is outside the allowed roots; "
    ):
        inspect_lora(made["kohya"])


def test_a_truncated_file_is_refused(made, roots):
    cut = roots / "cut.safetensors"
    data = made["diffusers"].read_bytes()
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(
        ValidationError, match=r"^LoRA file '.*cut\.safetensors' is not a readable .*truncated"
    ):
        inspect_lora(cut)


def test_a_file_of_no_lora_weights_is_refused(roots):
    path = write(roots / "full.safetensors", {"conv_in.weight": [8, 4, 3, 3]})
    with pytest.raises(ValidationError) as refused:
        inspect_lora(path)
    assert str(refused.value) == (
        "LoRA 'full' holds no LoRA weights (no lora_A/lora_down keys): is it a full checkpoint?"
    )
    write(path, {"lora_unet_x.hada_w1_a": [4, 4]})
    with pytest.raises(ValidationError, match=r"^LoRA 'full' is a LyCORIS LoHa/LoKr/OFT file; "):
        inspect_lora(path)


@pytest.mark.parametrize(
    ("shapes", "sentence"),
    [
        (
            pair("unet.a", 2048, 4096, 4096),
            r"claims rank 2048 for 'unet\.a' .*above 1024 or above the layer's",
        ),
        (pair("unet.a", 16, 8, 12), r"claims rank 16 for 'unet\.a' \(down \[16, 8\], up \[12, 16\]\)"),
        (
            {"unet.a.lora_down.weight": [32, 2, 3, 3]},
            r"claims rank 32 for 'unet\.a' \(down \[32, 2, 3, 3\], up",
        ),
        (
            {"unet.a.lora_A.weight": [4, 64], "unet.a.lora_B.weight": [64, 8]},
            r"up matrix of shape \[64, 8\] ",
        ),
    ],
)
def test_an_impossible_rank_is_refused(roots, shapes, sentence):
    with pytest.raises(ValidationError, match=r"^LoRA 'r' .*" + sentence):
        inspect_lora(write(roots / "r.safetensors", shapes))


def test_a_rank_past_one_of_its_layers_widths_loads(roots):
    """Wasteful, not impossible: a rank-128 LoRA on a 64-wide input, or a 3x3 convolution's 2 x 9 inputs."""
    assert (
        inspect_lora(write(roots / "r.safetensors", pair("transformer.x_embedder", 128, 64, 3072))).rank
        == 128
    )
    assert inspect_lora(write(roots / "c.safetensors", {"unet.c.lora_down.weight": [16, 2, 3, 3]})).rank == 16


# Finding and resolving


@pytest.fixture
def folders(tmp_path, made):
    first, second = tmp_path / "home" / "loras", tmp_path / "shared"
    for folder, name in ((first, "night"), (first, "style/ink"), (second, "night"), (second, "dusk")):
        (folder / f"{name}.safetensors").parent.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.safetensors").write_bytes(made["kohya"].read_bytes())
    (second / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{")
    os.utime(first / "night.safetensors", ns=(5, 5))
    return [first, second]


def test_the_folders_are_the_homes_then_the_bundled_ones(tmp_path):
    assert loras.lora_folders(tmp_path) == [tmp_path / "loras", ASSETS / "loras"]


def test_find_lists_every_lora_the_first_folder_winning_and_warns_of_a_broken_one(folders, caplog):
    with caplog.at_level(logging.WARNING, logger="pipelines.loras"):
        found = loras.find_loras([*folders, folders[0].parent / "missing"])
    assert [f.name for f in found] == ["dusk", "night", "style/ink"]
    assert found[1].path == (folders[0] / "night.safetensors").resolve()
    assert "broken.safetensors" in caplog.text and "is not a readable .safetensors file" in caplog.text


def test_resolve_a_name_a_subfolder_name_a_bare_stem_and_a_path(folders, roots, monkeypatch):
    assert resolve_lora("night", folders).path == (folders[0] / "night.safetensors").resolve()
    assert resolve_lora("night.safetensors", folders).name == "night"
    assert resolve_lora("style/ink", folders).name == resolve_lora("ink", folders).name == "style/ink"
    assert resolve_lora("dusk", folders).path.parent == folders[1].resolve()
    monkeypatch.setenv("STUDIO_MODEL_ROOTS", str(folders[0].parent.parent))
    assert resolve_lora(str(folders[1] / "dusk.safetensors"), []).name == "dusk"
    monkeypatch.chdir(folders[1])
    assert resolve_lora("./dusk.safetensors", []).path == (folders[1] / "dusk.safetensors").resolve()


def test_an_unknown_name_is_refused_with_the_folders_and_the_listing_command(folders):
    with pytest.raises(ValidationError) as refused:
        resolve_lora("nowhere", folders)
    assert str(refused.value) == (
        f"There is no LoRA named 'nowhere' in {folders[0]}, {folders[1]}; `python -m studio loras` lists the "
        "ones it finds."
    )


def test_a_bare_stem_found_twice_in_a_folder_is_refused(folders):
    (folders[0] / "old").mkdir()
    (folders[0] / "old" / "ink.safetensors").write_bytes(
        (folders[0] / "style" / "ink.safetensors").read_bytes()
    )
    with pytest.raises(
        ValidationError, match=r"^LoRA name 'ink' matches several files in .* \(old/ink, style/ink\)"
    ):
        resolve_lora("ink", folders)


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """HF_HUB_OFFLINE set, and an empty hub cache of this test's own."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    return tmp_path / "hub"


def test_a_hub_id_offline_and_not_cached_names_the_download_command_and_the_folder(offline_hub, tmp_path):
    with pytest.raises(ValidationError) as refused:
        resolve_lora("owner/name", [tmp_path / "loras"])
    assert str(refused.value) == (
        "LoRA 'owner/name' is not in the Hugging Face cache and the hub is offline or unreachable: run "
        "`hf download owner/name pytorch_lora_weights.safetensors` where it is reachable, or put the file "
        f"in {tmp_path / 'loras'}."
    )
    with pytest.raises(ValidationError, match=r"run `hf download owner/name sub/x\.safetensors` where"):
        resolve_lora("owner/name/sub/x.safetensors", [])


def test_a_hub_lora_already_in_the_cache_is_found_offline(offline_hub, made):
    snapshot = offline_hub / "models--owner--name" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (offline_hub / "models--owner--name" / "refs").mkdir()
    (offline_hub / "models--owner--name" / "refs" / "main").write_text("0123abcd")
    (snapshot / "night.safetensors").write_bytes(made["kohya"].read_bytes())
    lora = resolve_lora("owner/name", [])  # no pytorch_lora_weights.safetensors: the only file cached
    assert (lora.name, lora.layout, lora.path) == ("owner/name", "kohya", snapshot / "night.safetensors")
    assert resolve_lora("owner/name/night.safetensors", []).rank == 4
    (snapshot / "other.safetensors").write_bytes(made["kohya"].read_bytes())
    with pytest.raises(ValidationError, match=r"holds 2 \.safetensors files \(night\.safetensors, other\."):
        resolve_lora("owner/name", [])


def _hub(monkeypatch, files: dict[str, object], listing: list[str] | Exception):
    """The hub client answering from `files` (a path, or the error a download raises) and `listing`."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    asked = []

    def download(repo, filename, local_files_only=False):
        asked.append((repo, filename, local_files_only))
        found = files.get(filename, RemoteEntryNotFoundError("404", response=NOT_FOUND))
        if isinstance(found, Exception):
            raise found
        return str(found)

    def list_files(repo):
        if isinstance(listing, Exception):
            raise listing
        return listing

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    monkeypatch.setattr(huggingface_hub, "list_repo_files", list_files)
    return asked


NOT_FOUND = SimpleNamespace(headers={}, status_code=404, request=None, text="", json=dict)


def test_a_hub_repository_without_diffusers_file_name_gives_its_only_safetensors(monkeypatch, made):
    asked = _hub(monkeypatch, {"x.safetensors": made["kohya"]}, ["README.md", "x.safetensors"])
    assert resolve_lora("owner/name", []).layout == "kohya"
    assert asked == [
        ("owner/name", "pytorch_lora_weights.safetensors", False),
        ("owner/name", "x.safetensors", False),
    ]
    _hub(monkeypatch, {}, ["a.safetensors", "b.safetensors"])
    with pytest.raises(ValidationError, match=r"^Hub repository 'owner/name' holds 2 .* \(a\.safetensors, b"):
        resolve_lora("owner/name", [])
    _hub(monkeypatch, {}, [])
    with pytest.raises(
        ValidationError, match=r"^Hub repository 'owner/name' has no file 'y\.safetensors'\.$"
    ):
        resolve_lora("owner/name/y.safetensors", [])


def test_a_missing_repository_and_an_unreachable_hub_are_sentences(monkeypatch, tmp_path):
    _hub(
        monkeypatch,
        {"pytorch_lora_weights.safetensors": RepositoryNotFoundError("404", response=NOT_FOUND)},
        [],
    )
    with pytest.raises(
        ValidationError, match=r"^There is no LoRA repository 'owner/name' on the Hugging Face Hub"
    ):
        resolve_lora("owner/name", [])
    _hub(monkeypatch, {"pytorch_lora_weights.safetensors": LocalEntryNotFoundError("no connection")}, [])
    with pytest.raises(
        ValidationError, match=r"not in the Hugging Face cache and the hub is offline or unreachable"
    ):
        resolve_lora("owner/name", [tmp_path])
    _hub(monkeypatch, {}, ConnectionError("connection reset"))
    with pytest.raises(
        ValidationError, match=r"^LoRA 'owner/name' could not be fetched .* \(connection reset\)\.$"
    ):
        resolve_lora("owner/name", [])


# diffusers takes the files made here


@pytest.mark.filterwarnings("ignore:Already found a `peft_config`")  # three adapters on one model
def test_diffusers_loads_the_made_files_onto_the_bundled_model(made):
    pipe = StableDiffusionPipeline.from_pretrained(TINY, use_safetensors=True)
    for name in ("peft_names", "diffusers", "kohya"):
        pipe.load_lora_weights(made[name].parent, weight_name=made[name].name, adapter_name=name)
    adapters = pipe.get_list_adapters()
    assert set(adapters["unet"]) == {"peft_names", "diffusers", "kohya"}
    assert adapters["text_encoder"] == ["diffusers"]
    to_q = pipe.unet.down_blocks[0].attentions[0].transformer_blocks[0].attn1.to_q
    kohya = load_file(made["kohya"])["lora_unet_" + ATTN.replace(".", "_") + "_attn1_to_q.lora_down.weight"]
    assert torch.equal(to_q.lora_A["kohya"].weight, kohya)
    assert torch.equal(to_q.lora_A["kohya"].weight, to_q.lora_A["peft_names"].weight)


# The cache of tensors


def test_the_cache_serves_a_second_get_from_ram(made, roots):
    cache = LoraCache()
    lora = inspect_lora(made["kohya"])
    first = cache.get(lora)
    stats = cache.stats()
    assert (stats.misses, stats.hits, stats.files, stats.last_source) == (1, 0, 1, "disk")
    assert stats.bytes_held == sum(t.numel() * t.element_size() for t in first.values())
    assert stats.last_read_s is not None and stats.last_read_s > 0
    second = cache.get(lora)
    assert second is not first and all(second[k] is first[k] for k in first)
    assert (cache.stats().hits, cache.stats().last_source) == (1, "ram")


def test_the_cache_lets_the_least_recently_used_go_first_by_bytes(roots):
    files = [inspect_lora(write(roots / f"{n}.safetensors", pair("unet.a", 4, 64, 64))) for n in "abc"]
    one = 2 * 4 * 64 * 2  # two fp16 matrices of 4x64
    cache = LoraCache(budget_bytes=2 * one)
    cache.get(files[0]), cache.get(files[1]), cache.get(files[0]), cache.get(files[2])
    assert cache.stats().bytes_held == 2 * one
    cache.get(files[0])  # kept: b was the least recently used
    assert cache.stats().hits == 2
    cache.get(files[1])
    assert (cache.stats().misses, cache.stats().files) == (4, 2)
    big = inspect_lora(write(roots / "big.safetensors", pair("unet.a", 4, 1024, 1024)))
    cache.get(big)
    assert cache.stats().files == 2  # larger than the budget: read, not kept


def test_a_rewritten_file_is_read_again(roots):
    path = write(roots / "w.safetensors", pair("unet.a", 4, 64, 64))
    cache = LoraCache()
    lora = inspect_lora(path)
    assert cache.get(lora)["unet.a.lora_A.weight"].sum() == 0
    save_file({"unet.a.lora_A.weight": torch.ones(4, 64), "unet.a.lora_B.weight": torch.ones(64, 4)}, path)
    assert cache.get(lora)["unet.a.lora_A.weight"].sum() == 256
    assert (cache.stats().misses, cache.stats().files) == (2, 1)


def test_threads_share_the_cache_and_its_bytes_stay_counted(roots):
    files = [inspect_lora(write(roots / f"{n}.safetensors", pair("unet.a", 4, 64, 64))) for n in "abc"]
    cache = LoraCache(budget_bytes=2 * 2 * 4 * 64 * 2)

    def work(offset: int) -> None:
        for i in range(30):
            assert len(cache.get(files[(i + offset) % 3])) == 2

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stats = cache.stats()
    assert stats.hits + stats.misses == 120 and stats.files <= 2 and stats.bytes_held == stats.files * 1024
