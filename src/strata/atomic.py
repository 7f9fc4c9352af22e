"""Files written whole or not at all, and files read only when they are regular files.

* :func:`atomic_write`, :func:`atomic_path` (a temporary file for writers that need a name:
  netCDF4, h5py) and :func:`atomic_dir` (a temporary directory: a zarr store): the destination
  holds its previous contents or the whole new output, never a part; a store is replaced in one
  ``renameat2(RENAME_EXCHANGE)`` where Linux offers it.
* Temporary names say whose they are, ``.NAME.strata-tmp.<pid>.<host>.<random>``, and every
  atomic write first tidies its folder (:func:`clean_stale`): what writers killed with
  ``kill -9`` left is removed, a store a replacement had moved aside is put back.
* Errors name the user's path, not the temporary one.
* :func:`open_regular` opens a file for reading only if it is a regular file (a FIFO would
  block the reader).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from .errors import InvalidInputError


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


#: Permissions of written files and directories: those ``open`` and ``mkdir`` would give
#: (``mkstemp`` alone gives 0600, ``mkdtemp`` 0700).
_UMASK = _umask()
_FILE_MODE = 0o666 & ~_UMASK
_DIR_MODE = 0o777 & ~_UMASK


def open_regular(path) -> BinaryIO:
    """Open ``path`` for reading (binary), refusing anything that is not a regular file before a
    byte is read: a FIFO would block the reader, a directory or a device is not an input.

    The file is opened without blocking, checked with ``fstat`` (so the check and the read see the
    same file), then switched back to blocking reads.

    Args:
        path: a file path (``str`` or ``os.PathLike``).

    Returns:
        A binary file object opened for reading; the caller closes it.

    Raises:
        InvalidInputError: ``path`` is a directory, FIFO, socket or device.
        OSError: the file cannot be opened (``FileNotFoundError``, ``PermissionError``...).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
                    else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or
                    stat.S_ISBLK(mode) else "not a regular file")
            raise InvalidInputError(f"{os.fspath(path)} is {kind}: strata reads regular files only")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


# ---------------------------------------------------------------------------------------- atomic writes
#: Tags of the names of temporary files and directories: ``.NAME.strata-tmp.<pid>.<host>.<random>``
#: while ``NAME`` is written, ``.NAME.strata-old.<pid>.<host>.<random>`` for an existing directory
#: moved aside by a replacement on a file system without an atomic exchange.
TEMP_TAG = "strata-tmp"
ASIDE_TAG = "strata-old"
_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.(?P<tag>strata-tmp|strata-old)\.(?P<pid>[0-9]{1,10})\."
                        r"(?P<host>[0-9a-f]{8})\.[a-z0-9_]+")
#: This machine, in temporary names: a folder shared over the network holds other machines'
#: writers, whose process ids mean nothing here (their files are never removed).
_HOST = hashlib.blake2b(socket.gethostname().encode(), digest_size=4).hexdigest()
#: A process whose start lies more than this after a temporary file's last change is not the
#: file's writer (its process id was reused); the slack covers the boot time's one-second
#: resolution and file systems' coarse timestamps.
_CLOCK_SLACK = 2.0
_RENAME_NOREPLACE, _RENAME_EXCHANGE = 1, 2
_AT_FDCWD = -100


#: The longest part of a file's name kept in its temporary's name (a name near the file
#: system's limit of 255 bytes leaves room for the tag, process id, machine and random part).
_NAME_KEPT = 100


def _temp_prefix(name: str, tag: str) -> str:
    # a directory moved aside keeps its whole name: clean_stale puts it back under that name
    return f".{name if tag == ASIDE_TAG else name[:_NAME_KEPT]}.{tag}.{os.getpid()}.{_HOST}."


@functools.cache
def _boot_time() -> float | None:
    try:
        with open("/proc/stat", "rb") as f:
            return next(float(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None


def _process_start(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), from Linux's ``/proc``; None
    where that is not known."""
    boot = _boot_time()
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return None if boot is None else boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _writer_gone(pid: int, host: str, mtime: float) -> bool:
    """Whether the writer of a temporary file (its process id and machine, the file's last
    change) has ended: its process is gone, or the process now under that id (this one too)
    started after the file last changed. Never for another machine's files, nor when unsure."""
    if host != _HOST or pid <= 0:
        return False
    if pid != os.getpid():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            pass  # alive, another user's
        except (OSError, OverflowError):
            return False
    started = _process_start(pid)
    return started is not None and started > mtime + _CLOCK_SLACK


def _remove(path) -> None:
    """Remove a file or a directory tree, whatever is left of it (already gone: nothing to do)."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@functools.cache
def _renameat2_function():
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _rename_with(src, dst, flags: int) -> bool:
    """``renameat2(src, dst, flags)`` (Linux): True when done, False where the system or the file
    system does not offer it.

    Raises:
        OSError: the rename failed (``FileExistsError`` for ``RENAME_NOREPLACE`` onto an
            existing ``dst``).
    """
    fn = _renameat2_function()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(src), _AT_FDCWD, os.fsencode(dst), flags) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), os.fspath(src), None, os.fspath(dst))


def _rename_noreplace(src, dst) -> None:
    """Rename ``src`` to ``dst`` unless ``dst`` exists (``FileExistsError``), atomically where the
    system offers it (else checked just before an ordinary rename)."""
    if not _rename_with(src, dst, _RENAME_NOREPLACE):
        if os.path.lexists(dst):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(dst))
        os.rename(src, dst)


def clean_stale(folder) -> list[Path]:
    """Tidy what killed writers left in ``folder``: remove the temporary files and directories of
    :func:`atomic_path` and :func:`atomic_dir` whose writer has ended, and put back a directory
    that a replacement had moved aside (``.NAME.strata-old.*``) when nothing is at ``NAME``
    (the writer died between its two renames; with a store already at ``NAME`` the replacement
    had finished and the old one is removed).

    A writer has ended when no process has its id, or the process with that id started after the
    temporary file last changed (the id was reused, by this process too; from ``/proc``, on
    Linux). The files of live writers (this process's threads included) and of other machines
    (a shared folder) are never touched.
    Every atomic write calls this for its output's folder first.

    Args:
        folder: the directory to tidy; one that cannot be listed is left alone.

    Returns:
        The paths removed or put back.
    """
    folder = Path(folder)
    done = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return done
    for e in entries:
        m = _TEMP_NAME.fullmatch(e.name) if ".strata-" in e.name else None
        if m is None:
            continue
        try:
            mtime = e.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        if not _writer_gone(int(m["pid"]), m["host"], mtime):
            continue
        if m["tag"] == ASIDE_TAG and not os.path.lexists(folder / m["name"]):
            try:
                _rename_noreplace(e.path, folder / m["name"])
                done.append(folder / m["name"])
            except OSError:
                pass  # (put back by another process meanwhile; or left for a later run)
            continue
        try:
            _remove(e.path)
        except OSError:
            continue  # (not ours to remove, e.g. another user's: the write goes on)
        done.append(Path(e.path))
    return done


def _about(exc: OSError, path: Path, tmp) -> OSError:
    """``exc`` as the user sees it: an error on the temporary ``tmp`` (None: while creating it),
    or on no file (a full disk), names ``path`` instead; one on another file (an input read
    inside the block) is unchanged."""
    name = exc.filename
    inside = tmp is None or name is None or os.fspath(name) == os.fspath(tmp) or os.fspath(name).startswith(
        os.fspath(tmp) + os.sep)
    if exc.errno is None or not inside:
        return exc
    return OSError(exc.errno, exc.strerror, os.fspath(path))


def _exists_error(path: Path) -> FileExistsError:
    return FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), os.fspath(path))


@contextmanager
def atomic_path(path, *, replace: bool = True):
    """A temporary path beside ``path`` for a writer that needs a file name (netCDF4, h5py).

    When the block succeeds the file gets the permissions ``open`` would give, is synced and
    renamed to ``path``; when it fails it is removed. So ``path`` holds either its previous
    contents or the whole new file, never a part. The temporary file is named
    ``.NAME.strata-tmp.<pid>.<host>.<random>``; one left by a killed writer is removed by the
    next atomic write into the same folder (:func:`clean_stale`).

    Args:
        path: the file to write.
        replace: replace an existing ``path`` (default); False: raise ``FileExistsError``
            instead, checked before the block and, atomically where the system allows it, at the
            rename.

    Yields:
        The temporary path (``str``).

    Raises:
        FileExistsError: ``path`` exists and ``replace`` is false.
        OSError: creating, syncing or renaming the temporary file failed, or the block raised
            one about it (or about no file, as a full disk): the error names ``path``.
    """
    path = Path(path)
    clean_stale(path.parent)
    if not replace and os.path.lexists(path):
        raise _exists_error(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=_temp_prefix(path.name, TEMP_TAG))
    except OSError as exc:
        raise _about(exc, path, None) from exc
    os.close(fd)
    with _removed_on_failure(tmp, path):
        yield tmp
        os.chmod(tmp, _FILE_MODE)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            _rename_noreplace(tmp, path)


@contextmanager
def _removed_on_failure(tmp, path: Path):
    """Remove the temporary ``tmp`` when the block fails; an ``OSError`` is raised naming the
    user's ``path`` (:func:`_about`)."""
    try:
        yield
    except OSError as exc:
        _remove(tmp)
        new = _about(exc, path, tmp)
        if new is exc:
            raise
        raise new from exc
    except BaseException:
        _remove(tmp)
        raise


@contextmanager
def atomic_dir(path, replace: bool = False):
    """A temporary directory beside ``path`` for a writer of a directory (a zarr store).

    When the block succeeds the directory gets the permissions ``mkdir`` would give and takes
    the place of ``path``; when it fails it is removed. An existing ``path`` (with ``replace``)
    is swapped with the new directory in one step where the system offers it (Linux
    ``renameat2(RENAME_EXCHANGE)``), then removed: at every instant ``path`` is the old or the
    new directory. Elsewhere it is moved aside to ``.NAME.strata-old.<pid>.<host>.<random>``
    and the new one renamed in its place; a writer killed between the two renames leaves
    nothing at ``path`` until the next atomic write into the folder puts the old one back
    (:func:`clean_stale`).

    Args:
        path: the directory to write.
        replace: replace an existing ``path``.

    Yields:
        The temporary directory (:class:`pathlib.Path`).

    Raises:
        FileExistsError: ``path`` exists and ``replace`` is false (checked before the block and
            at the rename).
        OSError: creating or renaming the directory failed (the error names ``path``).
    """
    path = Path(path)
    clean_stale(path.parent)
    if os.path.lexists(path) and not replace:
        raise _exists_error(path)
    try:
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=_temp_prefix(path.name, TEMP_TAG)))
    except OSError as exc:
        raise _about(exc, path, None) from exc
    with _removed_on_failure(tmp, path):
        os.chmod(tmp, _DIR_MODE)
        yield tmp
        _install_dir(tmp, path, replace)


def _install_dir(tmp: Path, path: Path, replace: bool) -> None:
    """Put the finished directory ``tmp`` at ``path`` (see :func:`atomic_dir`)."""
    if not os.path.lexists(path):
        try:
            _rename_noreplace(tmp, path)
            return
        except FileExistsError:
            if not replace:
                raise
    if not replace:
        raise _exists_error(path)
    if _rename_with(tmp, path, _RENAME_EXCHANGE):
        _remove(tmp)  # (the old directory, now under the temporary name)
        return
    aside = path.parent / f"{_temp_prefix(path.name, ASIDE_TAG)}{secrets.token_hex(4)}"
    os.rename(path, aside)
    try:
        os.rename(tmp, path)
    except BaseException:
        os.rename(aside, path)
        raise
    _remove(aside)


def atomic_write(path, data, *, replace: bool = True) -> None:
    """Write ``data`` (bytes-like, or str as UTF-8) to ``path`` atomically (see
    :func:`atomic_path`, whose ``replace`` this passes on).

    Raises:
        FileExistsError: ``path`` exists and ``replace`` is false.
        OSError: the write failed (a full disk, a missing folder...); the error names ``path``.
    """
    if isinstance(data, str):
        data = data.encode()
    with atomic_path(path, replace=replace) as tmp, open(tmp, "wb") as f:
        f.write(data)
