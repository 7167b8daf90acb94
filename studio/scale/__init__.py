"""Scaling up: sharded checkpoints, ZeroGPU Spaces, and memory advice after an out-of-memory."""
