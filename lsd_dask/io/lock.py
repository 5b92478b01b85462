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

__all__ = ["LEASE_S", "FolderBusyError", "LockSet", "WorkLock"]

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
    name : str
        The lock file's name in a local folder.
    what : str
        What the folder is, for the error ("work folder", "output folder").
    """

    def __init__(
        self,
        folder: Folder,
        command: str | None = None,
        *,
        name: str = ".lock",
        what: str = "work folder",
    ) -> None:
        self.folder = folder
        self.name = name
        self.what = what
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

    def check_free(self) -> None:
        """Raise :class:`FolderBusyError` when another run holds the lock, creating
        nothing (a folder the run may yet refuse is left as it was)."""
        if self.held:
            return
        if not self.folder.local:
            holder = self._read_lease()
            if holder is not None and time.time() - float(holder.get("renewed", 0)) < LEASE_S:
                raise FolderBusyError(_busy(self.folder.url, holder, self.what))
            return
        import fcntl

        try:
            fd = os.open(self.folder.join(self.name), os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            return  # absent (or a link, which the folder's check refuses)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BlockingIOError:
            raise FolderBusyError(_busy(self.folder.url, _holder(fd), self.what)) from None
        finally:
            os.close(fd)

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

        path = self.folder.join(self.name)
        # not through a link: the lock's JSON would land in the link's target
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise FolderBusyError(_busy(self.folder.url, holder, self.what)) from None
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
            raise FolderBusyError(_busy(self.folder.url, holder, self.what))
        self._write_lease()
        time.sleep(1.0)  # a run that wrote its lease at the same moment shows up here
        holder = self._read_lease()
        if holder is None or holder.get("id") != self.owner["id"]:
            raise FolderBusyError(_busy(self.folder.url, holder or {}, self.what))
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


class LockSet:
    """Several folders' locks taken together (a context manager): all, or none.

    Parameters
    ----------
    *locks : WorkLock
        Taken in order, given back in reverse.
    """

    def __init__(self, *locks: WorkLock) -> None:
        self.locks = locks
        #: lines for the run's log, which opens after the locks are taken
        self.notes: list[str] = []

    def __enter__(self) -> LockSet:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def held(self) -> bool:
        return all(lock.held for lock in self.locks)

    def check_free(self) -> None:
        """:meth:`WorkLock.check_free` of each lock."""
        for lock in self.locks:
            lock.check_free()

    def acquire(self) -> None:
        """Take every lock, or none (those taken are given back when one fails)."""
        taken: list[WorkLock] = []
        try:
            for lock in self.locks:
                lock.acquire()
                taken.append(lock)
        except BaseException:
            for lock in reversed(taken):
                lock.release()
            raise

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()


def _holder(fd: int) -> dict[str, Any]:
    """The holder a lock file names (empty when unreadable)."""
    try:
        holder = json.loads(os.pread(fd, 65536, 0).decode() or "{}")
    except (ValueError, OSError):
        return {}
    return holder if isinstance(holder, dict) else {}


def _busy(url: str, holder: dict[str, Any], what: str = "work folder") -> str:
    who = f"pid {holder.get('pid', '?')} on {holder.get('host', '?')}"
    since = f" since {holder['since']}" if holder.get("since") else ""
    command = f" ({holder['command']})" if holder.get("command") else ""
    return (
        f"{what} {url} is in use by another run: {who}{since}{command}; wait for it "
        "to finish, or give this run another output or work folder."
    )
