"""Diffusion Studio: a pipeline manager and timing protocol for diffusers, with a Gradio face."""
