"""Compare's ready-made configurations follow the model: UNet techniques on SD models, the transformer step
cache on Flux, nothing that would be refused on the model chosen."""

from __future__ import annotations

from studio.ui.presets import presets_for, presets_for_model


def test_the_presets_offered_are_the_ones_the_model_can_run():
    sd, flux = presets_for("sd"), presets_for("flux")
    assert "channels_last" in sd and "first_block_cache" not in sd
    assert "first_block_cache" in flux and "bf16,first_block_cache" in flux
    assert not {"channels_last", "jit_trace_unet", "bf16,channels_last"} & set(flux)


def test_a_model_change_keeps_the_ticks_that_still_apply():
    update = presets_for_model("flux-tiny", "", ["bf16", "channels_last"])
    assert update["value"] == ["bf16"]
    assert "first_block_cache" in update["choices"]
