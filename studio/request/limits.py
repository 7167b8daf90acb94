"""The bounds of a generation request, importable without torch (the command line's --help names them)."""

MAX_PROMPT = 2000
MAX_STEPS = 200
MAX_SIDE = 2048
MIN_SIDE = 8
MAX_IMAGES = 8
MAX_SEED = 2**32 - 1
MAX_GUIDANCE = 30.0
