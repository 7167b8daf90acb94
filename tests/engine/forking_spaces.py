"""`spaces` as ZeroGPU runs a decorated call, for tests: in a forked child process, its result pickled back
through a pipe, with a bounded wait. It imports nothing of the studio, so a test's fresh process can install
it as `spaces` before the studio is imported."""

from __future__ import annotations

import os
import pickle
import select
import signal
import types

WORKER_TIMEOUT_S = 600


def _read_within(fd: int, pid: int, seconds: float) -> bytes:
    """The worker's answer from its pipe; a worker silent for `seconds` is killed and the test fails (a fork
    that deadlocked must not hang the suite)."""
    chunks = []
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        while True:
            ready, _, _ = select.select([pipe], [], [], seconds)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise TimeoutError(f"the forked worker said nothing for {seconds} s")
            chunk = pipe.read(1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.waitpid(pid, 0)
    return b"".join(chunks)


class ForkingSpaces(types.ModuleType):
    """`spaces` as ZeroGPU runs a decorated call: in a forked child process, its result (or its exception)
    pickled back through a pipe; the duration callable is asked first, in the caller."""

    def __init__(self) -> None:
        super().__init__("spaces")
        self.durations: list[int] = []
        self.workers: list[int] = []

    def GPU(self, task=None, *, duration=None, size=None):  # noqa: N802  (the real API's name)
        def decorate(fn):
            def handler(*args, **kwargs):
                self.durations.append(duration(*args, **kwargs))
                read, write = os.pipe()
                pid = os.fork()
                if pid == 0:  # the worker: run, send the result, leave without running the parent's cleanup
                    os.close(read)
                    with os.fdopen(write, "wb") as out:
                        out.write(pickle.dumps(fn(*args, **kwargs)))
                    os._exit(0)
                os.close(write)
                data = _read_within(read, pid, WORKER_TIMEOUT_S)
                self.workers.append(pid)
                return pickle.loads(data)

            return handler

        return decorate if task is None else decorate(task)
