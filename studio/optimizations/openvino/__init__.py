"""The `openvino` technique and everything it is made of, one module per piece.

- `technique`: the technique itself (settings, conflicts, apply and revert), registered on import.
- `parts`: the stand-ins swapped into a pipeline (UNet, VAE decoder, text encoder) and their compiles.
- `models`: conversion to OpenVINO, 8-bit weights, hybrid int8; `int8`: the calibrated int8 recipes.
- `calibration_samples`, `statistics`, `quantiles`: what NNCF calibrates on, and how its statistics are taken.
- `winograd`: the 3x3 convolutions rewritten for the CPU; `cache`: the disk cache of converted parts.
"""

from studio.optimizations.openvino import technique  # noqa: F401  (importing it registers the technique)
