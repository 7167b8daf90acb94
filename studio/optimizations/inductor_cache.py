"""Survive a damaged entry in inductor's on-disk cache.

Inductor keeps the shared objects it builds under its cache directory (`TORCHINDUCTOR_CACHE_DIR`,
by default one per user under /tmp, shared by every process of that user) and loads them again
when the same kernel comes back. A compile killed while writing one (out of memory, a SIGKILL) can
leave a truncated file there; every later compile that needs that kernel then fails to load it
("file too short", "invalid ELF header", "cannot read file data") until someone deletes it. The
same goes for inductor's precompiled C++ header (`precompiled_headers/*.h.gch`, ~150 MB), which it
keeps under its default directory whatever `TORCHINDUCTOR_CACHE_DIR` says: a truncated one makes
every kernel compile fail ("while reading precompiled header").

`recovering(fn)` wraps the call that triggers a compile (a compiled module's forward, a compiled
block's call): when the call fails because a shared object under the cache directory could not be
loaded, or because the compiler could not read the precompiled header, the damaged file is named in
a warning and deleted, and the call is made once more, which rebuilds the kernel (without the
precompiled header in this process; the next one builds it again). Any other error, and a second
failure, propagate unchanged. Dynamo needs no reset for this: it installs nothing for a frame whose
backend raised, so the second call compiles that frame afresh (and leaves the graphs other modules
compiled alone).
"""

from __future__ import annotations

import functools
import logging
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from studio import settings

log = logging.getLogger(__name__)

_SHARED_OBJECT = re.compile(r"(/[^\s:'\"]+\.so)\b")
_INCLUDE = re.compile(r"-include\s+(\S+)")


def cache_dir() -> Path:
    """Inductor's cache directory as inductor resolves it now (the environment variable, else its default)."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir as inductor_cache_dir

    return Path(inductor_cache_dir()).resolve()


def _header_dir() -> Path:
    """Where inductor keeps its precompiled headers (torch 2.13: `codecache._HEADER_DIR`)."""
    from torch._inductor import codecache

    return Path(getattr(codecache, "_HEADER_DIR", cache_dir() / "precompiled_headers")).resolve()


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """The exception, its causes and contexts, and the error dynamo wrapped (`inner_exception`)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo += [current.__cause__, current.__context__, getattr(current, "inner_exception", None)]


def damaged_entry(exc: BaseException) -> Path | None:
    """The cached shared object whose loading raised `exc` (an ImportError or OSError naming a .so file
    under inductor's cache directory that exists), or None when `exc` is not such a failure."""
    root = cache_dir()
    for error in _chain(exc):
        header = _damaged_header(error)
        if header is not None:
            return header
        if not isinstance(error, (ImportError, OSError)):
            continue
        for text in (getattr(error, "path", None), getattr(error, "filename", None), str(error)):
            for match in _SHARED_OBJECT.finditer(str(text or "")):
                path = Path(match.group(1)).resolve()
                if path.is_file() and path.is_relative_to(root):
                    return path
    return None


def _damaged_header(error: BaseException) -> Path | None:
    """The precompiled header (.gch) a failed C++ compile could not read, when that is why it failed."""
    output, cmd = getattr(error, "output", None), getattr(error, "cmd", None)
    if not isinstance(output, str) or "precompiled header" not in output or cmd is None:
        return None
    for match in _INCLUDE.finditer(cmd if isinstance(cmd, str) else " ".join(map(str, cmd))):
        gch = Path(match.group(1) + ".gch").resolve()
        if gch.is_file() and gch.is_relative_to(_header_dir()):
            return gch
    return None


def discard(entry: Path, exc: BaseException) -> None:
    """Delete a damaged cache entry, saying which one and why."""
    reason = next((str(e) for e in _chain(exc) if isinstance(e, (ImportError, OSError))), None)
    if reason is None:  # the compiler's own words about the header
        output = next(getattr(e, "output", "") for e in _chain(exc) if _damaged_header(e) is not None)
        reason = next((line for line in output.splitlines() if "precompiled header" in line), output)
    log.warning(
        "inductor cache entry %s could not be loaded (%s); deleting it and compiling again",
        entry,
        reason.strip().splitlines()[0] if reason.strip() else type(exc).__name__,
    )
    entry.unlink(missing_ok=True)


def _forget_failed_builds() -> None:
    """Drop inductor's in-process code caches (torch.compile's own `fresh_cache` does the same): a C++ build
    that failed stays there as a failed future, which the next compile of that kernel would raise again.
    Graphs compiled before keep the modules they loaded."""
    from torch._inductor.utils import clear_caches

    clear_caches()


def keep_headers_with_kernels() -> None:
    """Make inductor build its precompiled headers in `precompiled_headers/` of the cache directory in use,
    unless their directory was already chosen (`settings.precompiled_headers_in`). Inductor keeps them in its
    default directory whatever `TORCHINDUCTOR_CACHE_DIR` says, so a cache directory kept across restarts (a
    volume, a Space's persistent storage) would hold every kernel but not the ~150 MB headers, which the
    first kernel built after each restart would precompile again (seconds per set of compiler flags)."""
    from torch._inductor import codecache
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    if getattr(codecache, "_HEADER_DIR", None) == os.path.join(default_cache_dir(), "precompiled_headers"):
        settings.precompiled_headers_in(cache_dir() / "precompiled_headers")


def recovering(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn`, called once more after deleting a damaged inductor cache entry its compile failed to load (its
    precompiled headers kept with the kernels: `keep_headers_with_kernels`)."""
    keep_headers_with_kernels()

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (ImportError, OSError, RuntimeError) as exc:  # dynamo wraps backend errors in a RuntimeError
            entry = damaged_entry(exc)
            if entry is None:
                raise
            discard(entry, exc)
        _forget_failed_builds()
        return fn(*args, **kwargs)

    return call
