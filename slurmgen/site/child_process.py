"""A program started now and read later, for the checks a render makes on this machine (sinfo, bash
-n), without the subprocess module: its import, with signal's and selectors', was 7.7 of a render's
363 million instructions (issue 43: render within 0.35x of TorchX's dry run). os.posix_spawn starts
the program as subprocess does (vfork, then exec; only its three standard streams inherited). One
difference: SIGPIPE stays ignored in it, as Python has it, which neither program notices (each is
read to its end, or killed)."""

from __future__ import annotations

import os
import select
import time
from typing import Optional

SIGKILL = 9  # signal.SIGKILL, without the signal module's import


class Child:
    """`argv` (found on PATH) started now: its stdin a pipe for feed() (stdin=True) or /dev/null, one
    of its output streams (`read`: 1 stdout, 2 stderr) kept for finish(), the other to /dev/null;
    `env` its environment (this process's by default). FileNotFoundError where the program is not
    there."""

    def __init__(self, argv: list, read: int = 1, stdin: bool = False, env: Optional[dict] = None):
        self.returncode: Optional[int] = None
        self.output: Optional[bytes] = None
        devnull = os.open(os.devnull, os.O_RDWR)
        self.out, out_end = os.pipe()
        in_end, self.stdin = os.pipe() if stdin else (devnull, None)
        actions = [(os.POSIX_SPAWN_DUP2, in_end, 0), (os.POSIX_SPAWN_DUP2, out_end, read),
                   (os.POSIX_SPAWN_DUP2, devnull, 3 - read)]
        try:
            self.pid = os.posix_spawnp(argv[0], argv, os.environ if env is None else env, file_actions=actions)
        except BaseException:
            for fd in (self.out, self.stdin):
                if fd is not None:
                    os.close(fd)
            raise
        finally:
            for fd in {devnull, out_end, in_end}:  # the child's ends: its copies are its own
                os.close(fd)

    def feed(self, data: bytes) -> None:
        """`data` to its stdin, then the end of it (once). A program that has stopped reading (bash at
        its first error) is no fault here."""
        if self.stdin is None:
            return
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self.stdin, view):]
        except BrokenPipeError:
            pass
        finally:
            os.close(self.stdin)
            self.stdin = None

    def finish(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """What it wrote, once it has ended (its exit status in returncode); None where it had not
        within `timeout` seconds, and was killed. Its stdin ends first, if it was never fed."""
        if self.returncode is not None:
            return self.output
        self.feed(b"")
        deadline = None if timeout is None else time.monotonic() + timeout
        chunks = []
        ready = select.poll()  # poll, not select: a descriptor past 1024 in a busy host process
        ready.register(self.out, select.POLLIN)
        try:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and (left <= 0 or not ready.poll(left * 1000)):
                    os.kill(self.pid, SIGKILL)
                    break
                chunk = os.read(self.out, 65536)
                if not chunk:
                    self.output = b"".join(chunks)
                    break
                chunks.append(chunk)
        finally:
            os.close(self.out)
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.output
