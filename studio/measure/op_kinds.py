"""Operators by kind: the classifier table (operator name -> kind), each operator's self times and FLOPs
from `torch.profiler`'s events, and the split of a step's wall time by kind."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from torch.autograd import DeviceType
from torch.utils.flop_counter import sdpa_flop_count

# kind -> what it covers, in the order of every table and chart
KINDS: dict[str, str] = {
    "convolution": "convolution",
    "matmul": "matmul / linear",
    "attention": "attention (SDPA, softmax, bmm)",
    "norm": "normalisation (group / layer norm)",
    "elementwise": "element-wise (add, mul, silu, gelu, …)",
    "copy": "copies (copy_, to, contiguous, cat)",
    "other": "other operators",
    "overhead": "outside operators (Python, dispatch, idle device)",
}
# Operator name (namespace stripped: aten::, onednn::, quantized::) -> kind: the first full match wins.
# bmm and baddbmm count as attention: in these UNets only attention multiplies batched matrices
# (linear layers reach mm / addmm).
CLASSIFIER: tuple[tuple[str, str], ...] = (
    (
        "attention",
        r"_?scaled_dot_product.*|_(flash|efficient|cudnn)_attention.*|_?(safe_)?softmax|bmm|baddbmm",
    ),
    (
        "convolution",
        r".*convolution.*|(_slow_|thnn_|cudnn_|mkldnn_|miopen_|q)?conv([123]d|_transpose[123]d).*",
    ),
    (
        "matmul",
        r"mm|addmm|_addmm_activation|matmul|linear|_scaled_mm|_int_mm|addmv|mv|dot|q?linear.*|.*gemm.*",
    ),
    ("norm", r".*(group|layer|batch|rms|instance)_norm.*"),
    ("copy", r"copy_|_to_copy|to|contiguous|clone|cat|stack|_copy_from.*|repeat.*|constant_pad_nd|pad"),
    (
        "elementwise",
        r"(add|sub|rsub|mul|div|neg|silu|gelu|sigmoid|tanh|relu|exp|pow|sqrt|rsqrt|clamp|clamp_min|clamp_max"
        r"|where|fill|zero|addcmul|addcdiv|lerp|sin|cos|log|reciprocal|square|abs|maximum|minimum)_?"
        r"|triton_poi.*",
    ),
)
_PATTERNS = tuple((kind, re.compile(pattern)) for kind, pattern in CLASSIFIER)


def classify(name: str) -> str:
    """The kind of an operator, by its name (see `CLASSIFIER`); 'other' when nothing matches."""
    bare = name.rsplit("::", 1)[-1].split(".", 1)[0]
    return next((kind for kind, pattern in _PATTERNS if pattern.fullmatch(bare)), "other")


@dataclass
class OpStat:
    """One operator over the profiled step: its calls, self times (seconds) and FLOPs."""

    name: str
    calls: int = 0
    self_cpu_s: float = 0.0
    self_device_s: float = 0.0
    flops: int = 0

    @property
    def kind(self) -> str:
        return classify(self.name)


def _subtree_flops(event: Any) -> int:
    return (event.flops or 0) + sum(_subtree_flops(c) for c in event.cpu_children)


def _sdpa_flops(event: Any) -> int:
    """FLOPs of one scaled-dot-product attention from its recorded (query, key, value) shapes, unless the
    profiler already counted them in its children (a math fallback through bmm)."""
    shapes = [s for s in (event.input_shapes or [])[:3] if len(s) == 4]
    if len(shapes) < 3 or _subtree_flops(event):
        return 0
    return int(sdpa_flop_count(*shapes))


def op_stats(events: Any) -> tuple[list[OpStat], float]:
    """Operators by name from the profiler's events, and the device's busy seconds (its kernels, copies
    and sets; 0 on a CPU)."""
    by_name: dict[str, OpStat] = {}
    busy_us = 0.0
    for event in events:
        if getattr(event, "is_user_annotation", False):  # record_function ranges: their ops are counted
            continue
        if event.device_type != DeviceType.CPU:
            busy_us += event.self_device_time_total
            continue
        op = by_name.setdefault(event.name, OpStat(event.name))
        op.calls += 1
        op.self_cpu_s += event.self_cpu_time_total / 1e6
        op.self_device_s += event.self_device_time_total / 1e6
        op.flops += event.flops or 0
        if event.name == "aten::scaled_dot_product_attention":
            op.flops += _sdpa_flops(event)
    return list(by_name.values()), busy_us / 1e6


def split_by_kind(ops: list[OpStat], wall_s: float, on_device: bool, busy_s: float = 0.0) -> dict[str, float]:
    """Seconds per kind; `overhead` is the wall time no operator (on a device: no kernel) accounts for."""
    seconds = dict.fromkeys(KINDS, 0.0)
    for op in ops:
        seconds[op.kind] += op.self_device_s if on_device else op.self_cpu_s
    attributed = sum(seconds.values())
    if on_device:  # kernels no CPU operator launched (or that the profiler could not attribute)
        seconds["other"] += max(0.0, busy_s - attributed)
        attributed = max(attributed, busy_s)
    seconds["overhead"] = max(0.0, wall_s - attributed)
    return seconds
