"""The command line's output: stdout carries only the command's result (its JSON or its text for people);
everything else written while the command runs (libraries' progress bars, such as NNCF's, and any other
chatter, from Python or from native code) goes to stderr, so `--json` output always parses."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

_results: list[TextIO] = []  # where `emit` writes: the real stdout while a command runs


def _descriptor(stream: Any) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
        return None


@contextlib.contextmanager
def results_only_on_stdout() -> Iterator[None]:
    """Run a command with stdout kept for its result: descriptor 1 and `sys.stdout` point at stderr meanwhile,
    and `emit` writes to the stdout that was. Where stdout is no file descriptor (a test's capture), only
    Python's own `sys.stdout` is redirected."""
    out, err = sys.stdout, sys.stderr
    out.flush()
    fd, err_fd = _descriptor(out), _descriptor(err)
    if fd is None or err_fd is None:
        _results.append(out)
        try:
            with contextlib.redirect_stdout(err):
                yield
        finally:
            _results.pop()
        return
    saved = os.dup(fd)
    results = os.fdopen(os.dup(saved), "w", encoding=getattr(out, "encoding", None) or "utf-8")
    os.dup2(err_fd, fd)
    _results.append(results)
    try:
        with contextlib.redirect_stdout(err):
            yield
    finally:
        _results.pop()
        results.close()
        out.flush()
        os.dup2(saved, fd)
        os.close(saved)


def emit(data: Any, as_json: bool, text: str) -> None:
    """Print a command's result on stdout: JSON for programs, the text for people."""
    from studio.report.text import emit as write  # the vocabulary's, imported once a result is ready

    target = _results[-1] if _results else sys.stdout
    write(data, as_json, text, file=target)
    target.flush()
