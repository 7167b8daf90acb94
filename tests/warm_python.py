"""Python processes for tests, started warm: forked from a Python that has already imported torch, diffusers,
transformers, gradio and the studio's entry modules, instead of a new interpreter importing them again (10.5
to 11.7 s a process on a 2-core AMD EPYC Zen 3, measured alone; `make test`'s summary counts the processes
started each way).

`Popen` and `run` are `subprocess`'s, for the command lines a user types: `python -m module ...`,
`python script.py ...` and `python -c code ...`. The process is a real one with its own pid, its own
memory, the given working folder, environment, arguments and standard streams; it exits, is signalled and is
waited for as any other. What it does not do is import those libraries: so a process is started warm only
where its environment is the one the warm Python imported them under (`WARM_SAFE` lists the variables they
read only when called), without an interpreter option or a Popen argument that changes how a process starts;
any other is started cold, as `subprocess` does. A test that looks at which modules a process imported starts
it with `subprocess` itself.

The warm Python (`python -m tests.warm_python`, one per test process, started at its first warm process)
imports the libraries with its standard streams in files; each process it forks writes what those imports
printed to its own streams first, as a new interpreter would have.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import threading
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What the warm Python imports: the studio's entry modules, as the app (app.py) and the CLI import them, and
# with them torch, diffusers, transformers and gradio. Nothing of the studio runs at their import but
# `studio.settings.usable_compile_cache`, which reads only variables a process must share to be forked.
LIBRARIES = ("studio.engine.zerogpu", "studio.ui", "studio.cli", "studio.manager")
# Environment variables the libraries above read when called, not when imported: a process may set them
# differently from the warm Python and still be forked from it. The last two are set in the test process by
# torch as it loads a compiled kernel and as it starts its compile workers, and reach the processes tests
# start with the rest of its environment.
WARM_SAFE = (
    "STUDIO_",
    "GRADIO_ANALYTICS_ENABLED",
    "HF_TOKEN",
    "PYTEST_CURRENT_TEST",
    "_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR",
    "TORCH_WARM_POOL",
)
BASE_ENV = dict(os.environ)  # the environment the warm Python starts with (this module's import)
# torch's OpenMP and numpy's BLAS start their threads when imported unless told to use one, and a process
# with threads cannot be forked safely: warm starts need OMP_NUM_THREADS=1 (`make test`'s workers set it).
POSSIBLE = BASE_ENV.get("OMP_NUM_THREADS") == "1"


def _safe(name: str) -> bool:
    return name.startswith(WARM_SAFE)


# The command lines of this interpreter that started cold, by the environment variables that differed from
# `BASE_ENV` (the suite's summary lists them: a library that starts setting one in the test process would
# otherwise turn every later process cold unseen).
COLD: collections.Counter[str] = collections.Counter()
STARTED = collections.Counter()  # "warm": forked; "cold": a new interpreter (for any reason)


def forkable(args, cwd, env) -> bool:
    """A command line of this interpreter (`-m`, `-c` or a script, no option) run in the checkout (where the
    studio the warm Python imported is the one it would import) with an environment that differs from
    `BASE_ENV` only in `WARM_SAFE` variables."""
    if not POSSIBLE or not isinstance(args, (list, tuple)) or len(args) < 2 or args[0] != sys.executable:
        return False
    if Path(cwd or os.getcwd()).resolve() != ROOT:
        return False
    if not (args[1] in ("-m", "-c") and len(args) > 2 or str(args[1]).endswith(".py")):
        return False
    env = os.environ if env is None else env
    differ = sorted(n for n in set(env) | set(BASE_ENV) if not _safe(n) and env.get(n) != BASE_ENV.get(n))
    COLD.update(differ)
    return not differ


class _WarmPython:
    """The warm Python of this process: asked over a Unix socket for a process, it answers its pid; the
    exit status comes on a socket of the process's own."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        self._socket = ours
        self._log = tempfile.TemporaryFile()  # its own errors; its standard output is a file, as a test's is
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.warm_python", str(theirs.fileno())],
            cwd=ROOT,
            env=BASE_ENV,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        if ours.recv(64) != b"ready":
            self._log.seek(0)
            said = self._log.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"the warm Python did not start (exit status {self._process.wait()}): {said}")
        atexit.register(self.close)

    def spawn(self, args, cwd, env, streams: tuple[int, int, int]) -> tuple[int, socket.socket]:
        status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        request = json.dumps({"args": [str(a) for a in args[1:]], "cwd": str(cwd or os.getcwd()), "env": env})
        with self._lock:
            socket.send_fds(self._socket, [request.encode()], [*streams, theirs.fileno()])
            answer = self._socket.recv(64)
        theirs.close()
        if not answer:
            raise RuntimeError(f"the warm Python exited (status {self._process.poll()})")
        return int(answer), status

    def close(self) -> None:
        self._socket.close()
        self._process.wait(timeout=30)


_warm: _WarmPython | None = None
_warm_lock = threading.Lock()


def _warm_python() -> _WarmPython:
    global _warm
    with _warm_lock:
        if _warm is None:
            _warm = _WarmPython()
        return _warm


class Popen(subprocess.Popen):
    """`subprocess.Popen`, forked from the warm Python where `forkable`."""

    _status: socket.socket | None = None

    def _execute_child(self, args, executable, preexec_fn, close_fds, pass_fds, cwd, env, *rest):
        _, _, shell, p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite = rest[:9]
        restore_signals, gid, gids, uid, umask, start_new_session, process_group = rest[9:]
        plain = (
            executable is None
            and preexec_fn is None
            and not pass_fds
            and not shell
            and restore_signals
            and (gid, gids, uid, start_new_session) == (None, None, None, False)
            and umask < 0
            and process_group in (None, -1)
        )
        if not (plain and forkable(args, cwd, env)):
            STARTED["cold"] += 1
            super()._execute_child(args, executable, preexec_fn, close_fds, pass_fds, cwd, env, *rest)
            return
        STARTED["warm"] += 1
        own = (p2cread, c2pwrite, errwrite)
        streams = tuple(fd if fd != -1 else inherited for fd, inherited in zip(own, (0, 1, 2), strict=True))
        env = dict(os.environ if env is None else env)
        self.pid, self._status = _warm_python().spawn(args, cwd, env, streams)
        self._child_created = True
        self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)

    def _try_wait(self, wait_flags):
        if self._status is None:
            return super()._try_wait(wait_flags)
        self._status.setblocking(not wait_flags & os.WNOHANG)
        try:
            data = self._status.recv(64)
        except BlockingIOError:
            return 0, 0
        if not data:
            raise RuntimeError(f"the warm Python exited before process {self.pid} did")
        return self.pid, int(data)

    def _internal_poll(self, _deadstate=None, **kwargs):
        if self._status is None:
            return super()._internal_poll(_deadstate, **kwargs)
        if self.returncode is None and self._waitpid_lock.acquire(False):
            try:
                if self.returncode is None:
                    pid, status = self._try_wait(os.WNOHANG)
                    if pid == self.pid:
                        self._handle_exitstatus(status)
            finally:
                self._waitpid_lock.release()
        return self.returncode


def run(*popenargs, input=None, capture_output=False, timeout=None, check=False, **kwargs):  # noqa: A002
    """`subprocess.run` with `Popen` above."""
    if capture_output:
        kwargs["stdout"] = kwargs["stderr"] = subprocess.PIPE
    if input is not None:
        kwargs["stdin"] = subprocess.PIPE
    with Popen(*popenargs, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(input, timeout=timeout)
        except BaseException:  # a timeout too: killed, and waited for as the block closes
            process.kill()
            raise
        code = process.poll()
        if check and code:
            raise subprocess.CalledProcessError(code, process.args, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(process.args, code, stdout, stderr)


# The warm Python itself.


def _import_libraries() -> tuple[bytes, bytes]:
    """Import LIBRARIES with the standard streams in files: what they printed."""
    import importlib

    saved = [os.dup(1), os.dup(2)]
    files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
    for fd, file in zip((1, 2), files, strict=True):
        os.dup2(file.fileno(), fd)
    for name in LIBRARIES:
        importlib.import_module(name)
    sys.stdout.flush()
    sys.stderr.flush()
    printed = []
    for fd, file, old in zip((1, 2), files, saved, strict=True):
        os.dup2(old, fd)
        os.close(old)
        file.seek(0)
        printed.append(file.read())
        file.close()
    return printed[0], printed[1]


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


class _Child:
    """What a forked process runs: the command line, as the interpreter would."""

    def __init__(self, request: dict, printed: tuple[bytes, bytes]):
        self.args, self.cwd, self.env, self.printed = request["args"], request["cwd"], request["env"], printed

    def run(self) -> None:
        os.chdir(self.cwd)
        os.environ.clear()
        os.environ.update(self.env)
        for fd, text in zip((1, 2), self.printed, strict=True):
            if text:
                os.write(fd, text)
        if "numpy" in sys.modules:  # a new interpreter draws a new seed (`random` reseeds itself on fork)
            sys.modules["numpy"].random.seed()
        option, rest = self.args[0], self.args[1:]
        if option == "-m":  # as `python -m`: the module's file is argv[0], the working folder on the path
            import runpy

            sys.argv = [rest[0], *rest[1:]]
            sys.path[0] = self.cwd
            runpy._run_module_as_main(rest[0])  # noqa: SLF001 (the interpreter's own -m)
            return
        if option == "-c":
            sys.argv, sys.path[0], name, source = ["-c", *rest[1:]], "", "<string>", rest[0]
        else:
            sys.argv, sys.path[0] = [option, *rest], os.path.dirname(os.path.abspath(option))
            name, source = option, Path(option).read_text()
        main = types.ModuleType("__main__")
        if option != "-c":
            main.__file__ = name
        sys.modules["__main__"] = main
        exec(compile(source, name, "exec"), main.__dict__)  # noqa: S102 (python -c, python script.py)


def _serve(control: socket.socket, printed: tuple[bytes, bytes]) -> _Child | None:
    """Fork a process for each request; send each one's wait status when it exits. Returns in a forked
    process (what it runs); returns None in the warm Python once the test process has gone."""
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    children: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, the status socket)
    while True:
        for key, _ in selector.select():
            if key.fileobj is control:
                message, fds, _, _ = socket.recv_fds(control, 1 << 20, 4)
                if not message:
                    return None
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    control.close()
                    for pidfd, (_, status) in children.items():
                        os.close(pidfd)
                        status.close()
                    for fd, target in zip(fds[:3], (0, 1, 2), strict=True):
                        os.dup2(fd, target)
                    for fd in fds:
                        os.close(fd)
                    return _Child(json.loads(message), printed)
                for fd in fds[:3]:
                    os.close(fd)
                pidfd = os.pidfd_open(pid)
                children[pidfd] = (pid, socket.socket(fileno=fds[3]))
                selector.register(pidfd, selectors.EVENT_READ)
                control.send(str(pid).encode())
            else:
                pid, status = children.pop(key.fileobj)
                selector.unregister(key.fileobj)
                os.close(key.fileobj)
                _, code = os.waitpid(pid, 0)
                try:
                    status.sendall(str(code).encode())
                except (BrokenPipeError, ConnectionResetError):  # the test process no longer waits for it
                    pass
                status.close()


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    printed = _import_libraries()
    if _threads() != 1:
        raise SystemExit(f"the warm Python has {_threads()} threads after its imports: it cannot fork")
    control.send(b"ready")
    child = _serve(control, printed)
    if child is not None:
        child.run()


if __name__ == "__main__":
    main()
