"""One writer per work folder: a lock held for the whole run.

Two runs writing one work folder corrupt it: the second's start-up sweep removes the
temporaries the first is still writing, and each can publish outputs computed from the
other's inputs under its own stamp. So a run takes the folder's lock before it touches
anything, and a second run fails at once with one line naming the holder.

- **Local folders** (and network file systems that support POSIX locks): an exclusive
  ``fcntl.flock`` on ``<folder>/.lock``. The kernel drops it when the holder exits, however
  it exits (a killed run leaves no stale lock), and a paused holder still holds it.
- **Object storage** (``s3://...``): a lease object ``<folder>/lock.json`` naming its owner,
  renewed by a heartbeat thread every :data:`LEASE_S` / 4 seconds. A lease not renewed for
  :data:`LEASE_S` seconds belongs to a run that is gone and is taken over. Object stores
  have no atomic create here, so two runs starting within the same second can both write
  a lease; each then reads it back, and the one whose lease was overwritten fails.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from typing import Any

from .storage import Folder

__all__ = ["LEASE_S", "FolderBusyError", "WorkLock"]

#: seconds without a heartbeat after which an object-storage lease counts as abandoned
LEASE_S = 120.0


class FolderBusyError(RuntimeError):
    """Another run holds the work folder's lock."""


class WorkLock:
    """The exclusive lock of a work folder (a context manager).

    Parameters
    ----------
    folder : Folder
        The work folder.
    command : str, optional
        Recorded with the holder, so that the error a second run gets says what holds it.
    """

    def __init__(self, folder: Folder, command: str | None = None) -> None:
        self.folder = folder
        self.owner = {
            "id": uuid.uuid4().hex,
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": command or "",
        }
        self._fd: int | None = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None

    def __enter__(self) -> WorkLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def held(self) -> bool:
        """Whether this object holds the lock."""
        return self._fd is not None or self._beat is not None

    def acquire(self) -> None:
        """Take the lock (nothing to do if this object holds it), or raise
        :class:`FolderBusyError` naming its holder."""
        if self.held:
            return
        if self.folder.local:
            self._acquire_local()
        else:
            self._acquire_lease()

    def release(self) -> None:
        """Give the lock back (a lease object is deleted if it is still this run's)."""
        if self._fd is not None:
            import fcntl

            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        if self._beat is not None:
            self._stop.set()
            self._beat.join()
            self._beat = None
            try:
                holder = self._read_lease()
                if holder is not None and holder.get("id") == self.owner["id"]:
                    self.folder.fs.rm(self._lease_path)
            except Exception:  # the store gone: the lease expires by itself (LEASE_S)
                pass

    # local ------------------------------------------------------------------
    def _acquire_local(self) -> None:
        import fcntl

        path = self.folder.join(".lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                holder = json.loads(os.pread(fd, 65536, 0).decode() or "{}")
            except (ValueError, OSError):
                holder = {}
            os.close(fd)
            raise FolderBusyError(_busy(self.folder.url, holder)) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(self.owner).encode(), 0)
        self._fd = fd

    # object storage ---------------------------------------------------------
    @property
    def _lease_path(self) -> str:
        return self.folder.join("lock.json")

    def _read_lease(self) -> dict[str, Any] | None:
        try:
            with self.folder.fs.open(self._lease_path, "rb") as f:
                data = json.loads(f.read().decode())
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _write_lease(self) -> None:
        lease = {**self.owner, "renewed": time.time()}
        with self.folder.fs.open(self._lease_path, "wb") as f:
            f.write(json.dumps(lease).encode())

    def _acquire_lease(self) -> None:
        holder = self._read_lease()
        if holder is not None and time.time() - float(holder.get("renewed", 0)) < LEASE_S:
            raise FolderBusyError(_busy(self.folder.url, holder))
        self._write_lease()
        time.sleep(1.0)  # a run that wrote its lease at the same moment shows up here
        holder = self._read_lease()
        if holder is None or holder.get("id") != self.owner["id"]:
            raise FolderBusyError(_busy(self.folder.url, holder or {}))
        self._stop.clear()
        self._beat = threading.Thread(target=self._heartbeat, daemon=True, name="work-lease")
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(LEASE_S / 4):
            try:
                self._write_lease()
            except Exception:
                # a lost endpoint (botocore's and aiohttp's connection errors are not
                # OSError): the run's own reads and writes fail and say so in one line; a
                # heartbeat that died here printed its traceback beside that line
                pass


def _busy(url: str, holder: dict[str, Any]) -> str:
    who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
    since = f" since {holder['since']}" if holder.get("since") else ""
    command = f" ({holder['command']})" if holder.get("command") else ""
    return (
        f"work folder {url} is in use by another run: {who}{since}{command}; wait for it "
        "to finish, or give this run another output or work folder."
    )
