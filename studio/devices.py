"""What hardware is here, and which device a request should run on.

Nothing in this module touches an accelerator at import time. `detect()` probes
CUDA by allocating one tiny tensor (importable is not the same as functional),
and `resolve("auto")` never raises on a CPU-only host.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
from dataclasses import dataclass, field

import psutil
import torch

from studio.errors import UnavailableError

log = logging.getLogger(__name__)

# The /proc/cpuinfo flags the CPU kernels the studio chooses between depend on: AVX2 or AVX-512 for the
# compiled and OpenVINO paths, VNNI and AMX for int8 (`int8_path`), AVX512-BF16 and AMX for bf16.
KERNEL_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


@dataclass(frozen=True)
class GPU:
    index: int
    name: str
    total_memory: int
    capability: tuple[int, int]

    @property
    def supports_bf16(self) -> bool:
        return self.capability >= (8, 0)

    @property
    def supports_tf32(self) -> bool:
        return self.capability >= (8, 0)


@dataclass(frozen=True)
class Hardware:
    """A snapshot of the machine's compute devices and their abilities."""

    cuda_functional: bool
    cuda_reason: str
    gpus: tuple[GPU, ...]
    mps: bool
    cpu_model: str
    cpu_flags: frozenset[str] = field(default_factory=frozenset)
    cpu_count: int = 1
    cuda_visible_devices: str | None = None
    cpu_signature: str = ""  # "family 25 model 17 stepping 1" where /proc/cpuinfo says it, else ""
    memory_bytes: int = 0  # the machine's RAM (0: not known)

    @property
    def avx512(self) -> bool:
        return "avx512f" in self.cpu_flags

    @property
    def amx_bf16(self) -> bool:
        return "amx_bf16" in self.cpu_flags

    @property
    def cpu_bf16(self) -> bool:
        """Whether the CPU computes bf16 itself (AVX512-BF16 or AMX); elsewhere bf16 is emulated, and slow."""
        return bool({"avx512_bf16", "amx_bf16"} & self.cpu_flags)

    @property
    def cpu_kernels(self) -> list[str]:
        """The `KERNEL_FLAGS` this CPU has, in that order."""
        return [f for f in KERNEL_FLAGS if f in self.cpu_flags]

    @property
    def cpu_name(self) -> str:
        """The CPU as a figure should name it: the model name, then the family, model and stepping (a VM's
        model name can hide the generation: "AMD EPYC" is a Zen 3 as family 25 model 1 and a Zen 4 as model
        17, and a hypervisor can hide AVX-512 from either) and the kernel flags it shows, e.g.
        "AMD EPYC (family 25 model 17 stepping 1; avx2)"."""
        details = "; ".join(p for p in (self.cpu_signature, " ".join(self.cpu_kernels)) if p)
        return f"{self.cpu_model} ({details})" if details else self.cpu_model

    @property
    def device_names(self) -> list[str]:
        names = [f"cuda:{g.index}" for g in self.gpus] if self.cuda_functional else []
        if self.mps:
            names.append("mps")
        return [*names, "cpu"]

    def summary(self) -> dict:
        """A JSON-friendly description, for the System tab, the CLI and the run log."""
        return {
            "devices": self.device_names,
            "cuda_functional": self.cuda_functional,
            "cuda_reason": self.cuda_reason,
            "cuda_visible_devices": self.cuda_visible_devices,
            "gpus": [
                {
                    "index": g.index,
                    "name": g.name,
                    "memory_gb": round(g.total_memory / 2**30, 2),
                    "capability": f"{g.capability[0]}.{g.capability[1]}",
                    "bf16": g.supports_bf16,
                    "tf32": g.supports_tf32,
                }
                for g in self.gpus
            ],
            "mps": self.mps,
            "cpu": self.cpu_model,
            "cpu_signature": self.cpu_signature,
            "cpu_name": self.cpu_name,
            "cpu_kernels": self.cpu_kernels,
            "cpu_count": self.cpu_count,
            "ram_gb": round(self.memory_bytes / 2**30, 1),
            "avx512": self.avx512,
            "amx_bf16": self.amx_bf16,
        }


def _cpu_info() -> tuple[str, frozenset[str], str]:
    """The first processor's model name, flags and "family F model M stepping S" from /proc/cpuinfo
    (elsewhere: what `platform` says, no flags, no signature)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():  # the first processor's block ends here
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError as exc:  # not Linux: the model name from platform is enough
        log.debug("no /proc/cpuinfo: %s", exc)
    model = fields.get("model name") or platform.processor() or platform.machine()
    signature = " ".join(
        f"{name} {fields[key]}"
        for key, name in (("cpu family", "family"), ("model", "model"), ("stepping", "stepping"))
        if fields.get(key)
    )
    return model, frozenset(fields.get("flags", "").split()), signature


def _probe_cuda() -> tuple[bool, str, tuple[GPU, ...]]:
    if not torch.cuda.is_available():
        return False, "no CUDA device is visible to PyTorch here", ()
    try:
        torch.zeros(1, device="cuda")
    except RuntimeError as exc:
        return False, f"CUDA is installed but not functional: {exc}", ()
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        gpus.append(GPU(i, props.name, props.total_memory, (props.major, props.minor)))
    return True, "ok", tuple(gpus)


def _mps_available() -> bool:
    backend = getattr(torch.backends, "mps", None)
    return bool(backend and backend.is_available())


def int8_path(cpu_flags: frozenset[str]) -> str:
    """The int8 kernels oneDNN (PyTorch's and OpenVINO's) will use on a CPU with these /proc/cpuinfo flags.

    "amx" (`amx_int8`, Sapphire Rapids on) and "vnni" (`avx512_vnni`, or `avx_vnni` on AVX2 CPUs that have it)
    accumulate u8 x s8 products straight into int32. "reduced_range" (neither, e.g. an AVX2-only AMD EPYC):
    oneDNN multiplies with vpmaddubsw, which adds each pair of u8 x s8 products into a saturating int16
    (255 * 127 * 2 > 32767), so one side of each product must use half its range for the image to survive.
    """
    if "amx_int8" in cpu_flags:
        return "amx"
    if {"avx512_vnni", "avx_vnni"} & cpu_flags:
        return "vnni"
    return "reduced_range"


@functools.lru_cache(maxsize=1)
def detect() -> Hardware:
    """Probe the machine once. Call `detect.cache_clear()` to probe again."""
    functional, reason, gpus = _probe_cuda()
    model, flags, signature = _cpu_info()
    return Hardware(
        cuda_functional=functional,
        cuda_reason=reason,
        gpus=gpus,
        mps=_mps_available(),
        cpu_model=model,
        cpu_flags=flags,
        cpu_count=os.cpu_count() or 1,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        cpu_signature=signature,
        memory_bytes=psutil.virtual_memory().total,
    )


def resolve(name: str, hw: Hardware | None = None) -> str:
    """Turn a device name from a request into one that works here.

    Args:
        name: "auto", "cpu", "cuda", "cuda:N" or "mps".
        hw: the hardware snapshot (defaults to `detect()`).

    Returns:
        A concrete device string such as "cuda:0" or "cpu".

    Raises:
        UnavailableError: a specific device was asked for and does not work here.
    """
    hw = hw or detect()
    name = (name or "auto").strip().lower()
    if name == "auto":
        return hw.device_names[0]
    if name == "cuda":
        name = "cuda:0"
    if name in hw.device_names:
        return name
    if name.startswith("cuda"):
        raise UnavailableError(
            f"Device {name!r} is not available: {hw.cuda_reason}. Use device 'auto' or 'cpu'."
        )
    raise UnavailableError(
        f"Device {name!r} is not available here; choose one of {hw.device_names} or 'auto'."
    )
