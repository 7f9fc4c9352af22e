"""The strata container: preamble, checksummed header, then sections read on demand.

Layout (all integers little-endian; see ``docs/format.md``)::

    magic  b"STRA"          4 bytes
    version                 u8   (FORMAT_VERSION)
    kind                    u8   (KIND_LOSSY, ...)
    header length H         u32
    header                  H bytes, kind-specific
    header CRC-32           u32  over everything before it
    sections ...            kind-specific, each with its own CRC-32

A :class:`Source` reads a stream from bytes, a path or a binary file object by offset, so a
reader fetches the header and then only the sections it needs. Every length read from a
stream is checked against the bytes that are actually there before anything is allocated.
Files are written atomically with :func:`atomic_write` (:func:`atomic_path`, :func:`atomic_dir`
for writers that need a name), under temporary names that the next write into the same folder
recognises and removes once their writer is gone (:func:`clean_stale`).
"""
from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import hashlib
import io
import os
import re
import secrets
import shutil
import socket
import stat
import struct
import tempfile
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .checksum import crc32_parts
from .errors import CorruptStreamError, FormatError, InvalidInputError, ResourceLimitError, TruncatedStreamError
from .varint import put_many

MAGIC = b"STRA"
#: Version written. Version 3 (strata 0.4): lossy levels coded with interleaved rANS states and
#: contexts off the decoder's serial chain; checkpoint segments checked with CRC-32C. Version 4
#: (strata 0.5): checkpoint byte planes with 64 rANS states (SIMD decoding); lossy streams as in 3.
FORMAT_VERSION = 4
#: Versions read (docs/format.md, "Versions").
READABLE_VERSIONS = (2, 3, 4)
KIND_LOSSY = 1
KIND_CHECKPOINT = 2
#: Several lossy streams of one snapshot (:mod:`strata.enhance.fields`).
KIND_FIELDS = 3
KIND_NAMES = {KIND_LOSSY: "a lossy array", KIND_CHECKPOINT: "a checkpoint", KIND_FIELDS: "a field set"}

_PREAMBLE = struct.Struct("<4sBBI")
#: Largest header strata accepts (a header holds sizes, not data).
MAX_HEADER = 1 << 24

SourceLike = bytes | bytearray | memoryview | str | os.PathLike | BinaryIO


def crc32(data) -> int:
    return zlib.crc32(data) & 0xFFFFFFFF


def check_crc(data, expected: int, what: str) -> None:
    """Raise :class:`CorruptStreamError` unless ``crc32(data) == expected``."""
    if crc32(data) != expected:
        raise CorruptStreamError(f"checksum mismatch in {what}: the stream is corrupted")


def checked_body(data, what: str, min_body: int = 0) -> memoryview:
    """The body of a section that ends with the CRC-32 of the rest (``data``: bytes-like).

    Raises:
        CorruptStreamError: fewer than ``min_body`` + 4 bytes, or a checksum mismatch.
    """
    data = memoryview(data).cast("B")
    if len(data) < min_body + 4:
        raise CorruptStreamError(f"{what} of {len(data)} bytes is too short")
    body = data[:-4]
    check_crc(body, struct.unpack("<I", data[-4:])[0], what)
    return body


class Source:
    """Random access to a stream held in memory, in a file, or behind a file object.

    Args:
        source: ``bytes``-like object, a path, or a binary file object opened for reading
            (seekable). A path is opened here (:func:`open_regular`) and closed by :meth:`close`.

    Raises:
        TypeError: ``source`` is none of these.
        InvalidInputError: a path to a directory, FIFO, socket or device.
        OSError: a path that cannot be opened.
    """

    def __init__(self, source: SourceLike):
        self._own = None
        if isinstance(source, (bytes, bytearray, memoryview)):
            self._mem = memoryview(source).cast("B")
            self.size = len(self._mem)
            self._f = None
        elif isinstance(source, (str, os.PathLike)):
            self._f = self._own = open_regular(source)
            self._mem = None
            self.size = os.fstat(self._f.fileno()).st_size
        elif hasattr(source, "read") and hasattr(source, "seek"):
            self._f = source
            self._mem = None
            self._base = source.tell()
            self.size = source.seek(0, io.SEEK_END) - self._base
        else:
            raise TypeError(f"cannot read a strata stream from {type(source).__name__}")
        if self._f is not None and self._own is not None:
            self._base = 0

    def read(self, offset: int, n: int, what: str = "stream"):
        """``n`` bytes at ``offset`` (a memoryview for in-memory sources).

        Raises:
            TruncatedStreamError: fewer than ``n`` bytes are there.
        """
        if offset < 0 or n < 0 or offset + n > self.size:
            raise TruncatedStreamError(f"stream truncated: {what} needs bytes "
                                       f"{offset}..{offset + n}, the stream has {self.size}")
        if self._mem is not None:
            return self._mem[offset:offset + n]
        self._f.seek(self._base + offset)
        data = self._f.read(n)
        if len(data) != n:
            raise TruncatedStreamError(f"stream truncated while reading {what}")
        return data

    def close(self) -> None:
        if self._own is not None:
            self._own.close()
            self._own = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def pack(kind: int, header: bytes, sections: list) -> bytes:
    """Assemble a stream from a header and already checksummed sections."""
    pre = _PREAMBLE.pack(MAGIC, FORMAT_VERSION, kind, len(header))
    crc = struct.pack("<I", crc32(pre + header))
    return b"".join([pre, header, crc, *sections])


def unpack_header(src: Source, kind: int) -> tuple[memoryview | bytes, int]:
    """Validate the preamble and header checksum; return ``(header, offset of sections)``.

    Raises:
        FormatError: not a strata stream, another kind, or an unsupported version.
        TruncatedStreamError, CorruptStreamError: as their names say.
    """
    if src.size < _PREAMBLE.size:
        raise TruncatedStreamError(f"stream of {src.size} bytes is too short for a strata stream")
    pre = bytes(src.read(0, _PREAMBLE.size, "preamble"))
    magic, version, got_kind, hlen = _PREAMBLE.unpack(pre)
    if magic != MAGIC:
        raise FormatError("not a strata stream (bad magic bytes)")
    if version not in READABLE_VERSIONS:
        raise FormatError(f"strata format version {version} is not supported (this strata reads versions "
                          f"{', '.join(map(str, READABLE_VERSIONS))})")
    if got_kind != kind:
        raise FormatError(f"stream holds {KIND_NAMES.get(got_kind, f'kind {got_kind}')}, expected "
                          f"{KIND_NAMES[kind]}" + (" (read it with strata.enhance.decompress_fields)"
                                                   if got_kind == KIND_FIELDS else ""))
    if hlen > MAX_HEADER:
        raise ResourceLimitError(f"header length {hlen} exceeds {MAX_HEADER}")
    header = src.read(_PREAMBLE.size, hlen, "header")
    (crc,) = struct.unpack("<I", bytes(src.read(_PREAMBLE.size + hlen, 4, "header checksum")))
    check_crc(bytes(pre) + bytes(header), crc, "header")
    return header, _PREAMBLE.size + hlen + 4


def stream_version(src: Source) -> int:
    """The format version of a stream whose header :func:`unpack_header` accepted."""
    return src.read(4, 1, "preamble")[0]


class Writer:
    """Little-endian byte builder with varints."""

    def __init__(self):
        self.buf = bytearray()

    def u8(self, v: int) -> Writer:
        self.buf.append(v)
        return self

    def u32(self, v: int) -> Writer:
        self.buf += struct.pack("<I", v)
        return self

    def f32(self, v: float) -> Writer:
        self.buf += struct.pack("<f", v)
        return self

    def f64(self, v: float) -> Writer:
        self.buf += struct.pack("<d", v)
        return self

    def varint(self, v: int) -> Writer:
        if v < 0:
            raise ValueError("varint must be non-negative")
        while v >= 0x80:
            self.buf.append((v & 0x7F) | 0x80)
            v >>= 7
        self.buf.append(v)
        return self

    def varints(self, values) -> Writer:
        """The varints of ``values`` (integers >= 0, below ``2**56``) one after another."""
        out = put_many(np.asarray(values, np.int64))
        if out is None:
            raise ValueError("varints must be >= 0 and below 2**56")
        return self.raw(out.tobytes())

    def crcs(self, data, offsets) -> Writer:
        """The CRC-32 of each part of ``data`` (:func:`crc32_parts`), each as :meth:`u32`."""
        return self.raw(crc32_parts(data, offsets).astype("<u4").tobytes())

    def raw(self, b) -> Writer:
        self.buf += b
        return self

    def blob(self, b) -> Writer:
        """Length-prefixed bytes."""
        return self.varint(len(b)).raw(b)

    def getvalue(self) -> bytes:
        return bytes(self.buf)


class Reader:
    """Bounds-checked reader matching :class:`Writer`; errors name ``what``."""

    def __init__(self, buf, what: str = "header"):
        self.buf = memoryview(buf).cast("B") if not isinstance(buf, memoryview) else buf
        self.pos = 0
        self.what = what

    def _take(self, n: int):
        if self.pos + n > len(self.buf):
            raise CorruptStreamError(f"{self.what} ends early")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def u8(self) -> int:
        return self._take(1)[0]

    def u32(self) -> int:
        return struct.unpack("<I", self._take(4))[0]

    def f32(self) -> float:
        return struct.unpack("<f", self._take(4))[0]

    def f64(self) -> float:
        return struct.unpack("<d", self._take(8))[0]

    def varint(self, limit: int = 1 << 62) -> int:
        v = shift = 0
        while True:
            b = self._take(1)[0]
            v |= (b & 0x7F) << shift
            if b < 0x80:
                break
            shift += 7
            if shift > 63:
                raise CorruptStreamError(f"malformed varint in {self.what}")
        if v > limit:
            raise CorruptStreamError(f"value {v} in {self.what} exceeds {limit}")
        return v

    def raw(self, n: int):
        return self._take(n)

    def blob(self, limit: int = 1 << 40):
        return self._take(self.varint(limit))

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise CorruptStreamError(f"{len(self.buf) - self.pos} unexpected trailing bytes in {self.what}")


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
    try:
        yield tmp
        os.chmod(tmp, _FILE_MODE)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            _rename_noreplace(tmp, path)
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
    try:
        os.chmod(tmp, _DIR_MODE)
        yield tmp
        _install_dir(tmp, path, replace)
    except OSError as exc:
        _remove(tmp)
        new = _about(exc, path, tmp)
        if new is exc:
            raise
        raise new from exc
    except BaseException:
        _remove(tmp)
        raise


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
