"""Diffusion Studio: a pipeline manager and timing protocol for diffusers, with a Gradio face."""

from studio.settings import usable_compile_cache

# Before anything imports diffusers (and with it torch._dynamo, which creates torch.compile's cache folder).
usable_compile_cache()
