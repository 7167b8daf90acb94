"""fused_qkv (studio.optimizations.attention): one projection for query, key and value in every attention
layer, alongside SDPA; taking it off puts the separate projections back and leaves no fused layer behind."""

from __future__ import annotations

from tests.tiny import technique_request as request


def test_fused_qkv_switches_processors_and_removes_the_fused_layers(manager):
    from diffusers.models.attention_processor import AttnProcessor2_0, FusedAttnProcessor2_0

    with manager.acquire(request(["fused_qkv", "sdpa"])) as p:
        unet = p.pipe.unet
        assert {type(x) for x in unet.attn_processors.values()} == {FusedAttnProcessor2_0}
        assert hasattr(unet.down_blocks[0].attentions[0].transformer_blocks[0].attn1, "to_qkv")
        assert hasattr(unet.down_blocks[0].attentions[0].transformer_blocks[0].attn2, "to_kv")
    with manager.acquire(request(["sdpa"])) as p:  # fused_qkv removed, sdpa stays
        assert {type(x) for x in p.pipe.unet.attn_processors.values()} == {AttnProcessor2_0}
        names = {n.rsplit(".", 1)[-1] for n, _ in p.pipe.unet.named_modules()} | {
            n.rsplit(".", 1)[-1] for n, _ in p.pipe.vae.named_modules()
        }
        assert not names & {"to_qkv", "to_kv"}
        assert not any(getattr(m, "fused_projections", False) for m in p.pipe.unet.modules())


def test_fused_qkv_combines_with_sdpa():
    assert request(["fused_qkv", "sdpa"]).optimizations == ("sdpa", "fused_qkv")
