"""Measurement: the interleaved timing protocol and the host-noise probe."""
