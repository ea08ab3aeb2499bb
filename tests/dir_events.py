"""Names created in, or moved into, watched folders as they happen (Linux inotify, through libc):
a checkpoint's files as a save writes them, the shared heartbeat folder's operations counted."""
from __future__ import annotations

import ctypes
import os
import select
import struct
import time
from pathlib import Path

_IN_CREATE, _IN_MOVED_TO = 0x100, 0x80
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, name length; the name follows


class DirEvents:
    def __init__(self, *folders: Path):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.names: list[str] = []  # every name seen, in order
        for folder in folders:
            self.add(folder)

    def add(self, folder: Path) -> None:
        """Watch one more folder (events from every watched folder count)."""
        if self.libc.inotify_add_watch(self.fd, str(folder).encode(), _IN_CREATE | _IN_MOVED_TO) < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {folder}")

    def _read(self, timeout: float) -> list[str]:
        """The names that arrive within timeout (none: at once), appended to self.names."""
        if not select.select([self.fd], [], [], timeout)[0]:
            return []
        data, offset, new = os.read(self.fd, 65536), 0, []
        while offset < len(data):
            length = _EVENT.unpack_from(data, offset)[3]
            offset += _EVENT.size
            new.append(data[offset:offset + length].rstrip(b"\0").decode())
            offset += length
        self.names += new
        return new

    def drain(self) -> list[str]:
        """Every name so far, once the queue has been quiet for 0.1 s."""
        while self._read(0.1):
            pass
        return self.names

    def wait_for(self, name: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if name in self._read(min(1.0, max(0.0, deadline - time.monotonic()))):
                return True
        return False

    def close(self) -> None:
        os.close(self.fd)
