"""One training of an export folder at a time. Two `eas train` runs on one folder would write the
same checkpoint and model files from two trainings; the second is refused, in one line, while the
first holds the folder. The lock is the kernel's (flock): it goes with the process that held it,
however that process ends, so a killed training never leaves the folder locked. Its file, which
names the holder, exists only while a training holds it: a refused or finished training leaves
the folder as it found it."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from eas.errors import UserError

LOCK_FILE = ".eas-train.lock"


def _open(path: Path, folder: Path):
    try:
        return open(path, "a+")  # noqa: SIM115 - held open for the whole training: closing it releases the lock
    except OSError as error:
        read_only = error.errno in (errno.EACCES, errno.EPERM, errno.EROFS)
        why = "it is read-only (the export is left as it is)" if read_only else error.strerror or str(error)
        raise UserError(f"cannot write {folder}: {why}") from None


def _acquire(path: Path, folder: Path):
    """The open, locked lock file; a UserError naming the holder when another process has it."""
    for _ in range(10):
        handle = _open(path, folder)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read(200).strip()
            handle.close()
            raise UserError(f"{folder} is being trained by another process ({holder or 'which one is unknown'}); "
                            "wait for it to finish, or train a copy of the folder") from None
        try:  # the file a holder removed on release may be the one we locked: then lock the new one
            if os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino:
                return handle
        except FileNotFoundError:
            pass
        handle.close()
    raise UserError(f"cannot lock {folder}: its lock file keeps changing")


@contextmanager
def training_lock(folder: Path) -> Iterator[None]:
    """Hold `folder` for this process's training (and its hand-over) or refuse it."""
    path = Path(folder) / LOCK_FILE
    handle = _acquire(path, Path(folder))
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}")
        handle.flush()
        yield
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still holding it: the next holder makes a file of its own
        handle.close()  # closing releases the lock
