"""One AOTInductor build per exported graph for the whole suite: `torch._inductor.aoti_compile_and_package`
wrapped, in every Python process the suite starts, by a copy of the package an earlier identical build wrote.

Inductor's FX graph cache, which serves the suite's `torch.compile` builds again, is bypassed in AOT mode,
and several tests compile the bundled model's UNet at the same shape in studio homes of their own (the engine,
a fault case, a ZeroGPU worker, a restarted server in the browser): each of them still meets an empty home, so
the studio still exports, says "cold" and keeps the package; the C++ and inductor's lowering are paid once.
The key is everything a build reads: the exported graph as printed with its shapes, the dtype, shape, strides
and values of every input and constant (a package holds some of them inside itself, such as a bias folded
into a kernel), the graph's signature and inputs' ranges, the inductor settings and torch's version. Builds of
one key wait for each other (a file lock), so two workers never compile it twice."""

from __future__ import annotations

import fcntl
import functools
import hashlib
import os
import shutil
from pathlib import Path

FOLDER_VARIABLE = "SUITE_PACKAGE_MEMO"  # not STUDIO_*: the suite's servers start without those
HITS_FILE = "hits.log"
BUILDS_FILE = "builds.log"


def key(exported, inductor_configs) -> str:
    return _digest(described_build(exported, inductor_configs))


def _digest(described: str) -> str:
    return hashlib.sha256(described.encode()).hexdigest()[:24]


def described_build(exported, inductor_configs) -> str:
    """Everything a build reads, as text (kept beside each package, to compare)."""
    import torch

    def described(value) -> str:
        if isinstance(value, torch.Tensor):
            return f"{value.dtype}{tuple(value.shape)}{value.stride()}{value.device.type}"
        return repr(value)

    def values(value) -> str:  # a package holds some tensors inside itself (a bias folded into a kernel)
        flat = value.detach().to("cpu").contiguous().reshape(-1)
        return hashlib.sha256(flat.view(torch.uint8).numpy().tobytes()).hexdigest()[:16]

    graph = exported.graph_module
    nodes = [(node.name, described(node.meta.get("val"))) for node in graph.graph.nodes]
    tensors = sorted(
        (name, described(value), values(value) if isinstance(value, torch.Tensor) else "")
        for name, value in {**exported.state_dict, **exported.constants}.items()
    )
    parts = [
        torch.__version__,
        graph.print_readable(print_output=False, include_stride=True, include_device=True),
        repr(nodes),
        repr(tensors),
        str(exported.graph_signature),
        repr(exported.range_constraints),
        repr([(e.fqn, str(e.signature.in_spec) if e.signature else "") for e in exported.module_call_graph]),
        repr(sorted((inductor_configs or {}).items())),
    ]
    return "\n".join(parts)


def wrap(compile_, folder: Path):
    """`compile_` (aoti_compile_and_package) serving each key's package from `folder` after its first
    build."""

    @functools.wraps(compile_)
    def memoized(exported, package_path=None, inductor_configs=None, **kwargs):
        if package_path is None or kwargs:  # not how the studio calls it: compile as asked
            return compile_(exported, package_path=package_path, inductor_configs=inductor_configs, **kwargs)
        described = described_build(exported, inductor_configs)
        name = _digest(described)
        kept = folder / f"{name}.pt2"
        folder.mkdir(parents=True, exist_ok=True)
        with open(folder / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not kept.exists():
                compile_(exported, package_path=package_path, inductor_configs=inductor_configs)
                shutil.copy(package_path, f"{kept}.part")
                os.replace(f"{kept}.part", kept)
                kept.with_suffix(".txt").write_text(described)
                _note(folder / BUILDS_FILE, name)
                return package_path
        shutil.copy(kept, package_path)
        _note(folder / HITS_FILE, name)
        return package_path

    memoized.memo_folder = folder
    return memoized


def _note(log: Path, name: str) -> None:
    """One line per build or copy: the key, the test that asked (where pytest says) and the process."""
    test = os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0]
    with open(log, "a") as out:
        out.write(f"{name} {test or '-'} {os.getpid()}\n")


def install() -> None:
    """Wrap torch._inductor's compile when the suite names a folder (FOLDER_VARIABLE); torch stays unimported
    until the process imports it."""
    folder = os.environ.get(FOLDER_VARIABLE)
    if not folder:
        return
    import sys

    module = sys.modules.get("torch._inductor")
    if module is not None:
        _patch(module, Path(folder))
        return
    sys.meta_path.insert(0, _Finder(Path(folder)))


def _patch(module, folder: Path) -> None:
    current = getattr(module, "aoti_compile_and_package", None)
    if current is not None and not hasattr(current, "memo_folder"):
        module.aoti_compile_and_package = wrap(current, folder)


class _Finder:
    """Patches torch._inductor right after its own import has run."""

    def __init__(self, folder: Path):
        self.folder = folder

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch._inductor":
            return None
        import importlib.machinery

        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        execute, folder = spec.loader.exec_module, self.folder

        def exec_module(module):
            execute(module)
            _patch(module, folder)

        spec.loader.exec_module = exec_module
        return spec
