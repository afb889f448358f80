"""The state dir is kctl's alone: its directories 0700, its files 0600, created so whatever
the umask; a state dir that another user owns or can write is refused (as ssh refuses a
``~/.ssh`` others can write), and every file in it is opened without following a symlink
(``O_NOFOLLOW``; ``O_EXCL`` where the file must be new). A path named by the store (a log)
is opened only where it lies inside the state dir.

Every refusal is :class:`~kctl.errors.UnsafeState` (exit 5) naming the path and the fix,
and touches nothing: the target of a symlink is never opened, created or truncated.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import Path

from kctl.errors import UnsafeState

DIR_MODE = 0o700
FILE_MODE = 0o600


def _refuse(path: Path | str, why: str, fix: str) -> UnsafeState:
    return UnsafeState(f"{path}: {why}; kctl refused it and touched nothing", hint=fix)


def check_dir(path: Path) -> None:
    """Refuse ``path`` unless it is a real directory (not a symlink) that this user owns
    and no other user can write."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(
            path,
            "is a symlink",
            f"replace it with a real directory: rm {path} && mkdir -m 700 {path}",
        )
    if not stat.S_ISDIR(st.st_mode):
        raise _refuse(path, "is not a directory", "remove it, or choose another --state-dir")
    if st.st_uid != os.getuid():
        raise _refuse(
            path,
            f"is owned by another user (uid {st.st_uid})",
            "use a state dir of your own (--state-dir), or run kctl as its owner",
        )
    if st.st_mode & 0o022:
        raise _refuse(
            path,
            f"other users can write it (mode {stat.S_IMODE(st.st_mode):o})",
            f"chmod 700 {path}",
        )


def ensure_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents 0700, or check the one there
    (:func:`check_dir`, a symlink or another user's directory refused), tightening
    kctl's own directory to 0700 if others may read it."""
    path = Path(path)
    missing: list[Path] = []
    here = path
    while not os.path.lexists(here) and here.parent != here:
        missing.append(here)
        here = here.parent
    for directory in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(directory, DIR_MODE)  # the umask may mask this mode ...
            os.chmod(directory, DIR_MODE)  # ... but not this one
    check_dir(path)
    if stat.S_IMODE(os.stat(path).st_mode) != DIR_MODE:
        os.chmod(path, DIR_MODE)
    return path


def open_fd(path: Path | str, flags: int, *, new: bool = False) -> int:
    """``os.open`` of a file in the state dir: never through a symlink, created 0600,
    a regular file only; ``new``: the file must not exist yet (``O_EXCL``)."""
    flags |= os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    if new:
        flags |= os.O_CREAT | os.O_EXCL
    try:
        fd = os.open(path, flags, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refuse(path, "is a symlink", f"remove it: rm {path}") from None
        if exc.errno == errno.EEXIST and new:
            raise _refuse(
                path, "already exists where kctl creates a new file", f"remove it: rm {path}"
            ) from None
        if exc.errno == errno.ENXIO:  # a FIFO with no writer, opened non-blocking
            raise _refuse(path, "is not a regular file", f"remove it: rm {path}") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, "is not a regular file", f"remove it: rm {path}")
        if st.st_uid != os.getuid():
            raise _refuse(path, f"is owned by another user (uid {st.st_uid})", f"rm {path}")
        if stat.S_IMODE(st.st_mode) != FILE_MODE:
            os.fchmod(fd, FILE_MODE)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_new(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` as a new 0600 file. An existing regular file is
    unlinked first (never written through); a symlink or anything else is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise _refuse(path, "is a symlink", f"remove it: rm {path}")
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(path, "is not a regular file", f"remove it: rm -r {path}")
        os.unlink(path)  # replaced by a new file, never written through
    fd = open_fd(path, os.O_WRONLY, new=True)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def inside(state_dir: Path, path: str | Path) -> Path:
    """``path`` (named by the store) if it lies inside ``state_dir``; refuse it otherwise,
    so a damaged or edited store cannot make kctl read or write elsewhere."""
    root = Path(os.path.abspath(state_dir))
    target = Path(os.path.abspath(path))
    if target != root and root not in target.parents:
        raise _refuse(
            target,
            f"is named by the store but lies outside the state dir {root}",
            "the store's record was edited or damaged; kctl reads its own files only",
        )
    return target


def read_text(path: Path) -> str:
    """A state-dir file's text, opened without following a symlink."""
    fd = open_fd(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as fh:
        return fh.read().decode("utf-8", "replace")


def check_file(path: Path, *, tighten: bool = True) -> None:
    """Refuse ``path`` if it exists and is a symlink, not a regular file, or another
    user's; for files a library opens by name (SQLite's store). ``tighten``: make
    kctl's own file 0600 if it is not."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(path, "is a symlink", f"remove it: rm {path}")
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, "is not a regular file", f"remove it: rm -r {path}")
    if st.st_uid != os.getuid():
        raise _refuse(path, f"is owned by another user (uid {st.st_uid})", f"rm {path}")
    if tighten and stat.S_IMODE(st.st_mode) != FILE_MODE:
        os.chmod(path, FILE_MODE)
