"""int8 dynamic quantization (studio.optimizations.quantization, with torchao): the UNet's linear layers are
quantized and its convolutions left in floating point, and reverting puts the very same weights back;
fused_qkv added to a quantized UNet is fused from the float weights."""

from __future__ import annotations

import numpy as np
import torch

from studio.measure.quality import max_abs_diff
from tests.tiny import needs_torchao, run
from tests.tiny import technique_request as request


@needs_torchao
def test_int8_dynamic_quantizes_linears_and_puts_the_same_weights_back(manager):
    with manager.acquire(request()) as p:
        unet = p.pipe.unet
    linears = [m for m in unet.modules() if isinstance(m, torch.nn.Linear)]
    before = [m.weight for m in linears]
    with manager.acquire(request(["int8_dynamic"])):
        assert all(type(m.weight.data).__name__ == "Int8Tensor" for m in linears)
        assert unet.conv_in.weight.dtype == torch.float32, "convolutions stay in floating point"
    run(manager, request())
    assert all(m.weight is w for m, w in zip(linears, before, strict=True))
    assert not any("extra_repr" in vars(m) for m in linears)


@needs_torchao
def test_fused_qkv_added_to_a_quantized_unet_is_fused_from_float_weights(manager, baseline):
    int8, _ = run(manager, request(["int8_dynamic"]))
    both, prepared = run(manager, request(["int8_dynamic", "fused_qkv"]))  # fused_qkv applied after int8
    attn = prepared.pipe.unet.down_blocks[0].attentions[0].transformer_blocks[0].attn1
    assert type(attn.to_qkv.weight.data).__name__ == "Int8Tensor"
    assert max_abs_diff(both, int8) <= 1e-3
    run(manager, request(["int8_dynamic"]))  # fused_qkv removed while int8 stays
    assert "to_qkv" not in attn._modules
    assert np.array_equal(run(manager, request())[0], baseline)
