"""The tar side of workspace archives: blocking, run on worker threads by `transfer.py`.

`unpack` writes members itself rather than letting tarfile extract them: every member
first passes `tarfile.data_filter` (no absolute names, no `..` escape, no links leading out
of the target directory, no device files or FIFOs, no set-id bits), then every path is
walked from a descriptor of the workspace root with O_NOFOLLOW (`paths.resolve`), so a
symlink already in the workspace, or one an earlier member planted, never carries a write
outside, even if a command swaps a directory for a symlink mid-upload. Files are written to
a temporary name renamed over the target, never through a link; new files, directories and
links get the workspace owner's uid/gid (files/ops.py's rule).

`pack` walks with descriptors too and never follows a symlink. Neither holds an archive
or a file whole in memory. No asyncio here.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import posixpath
import secrets
import stat
import tarfile
import zlib
from dataclasses import dataclass
from typing import IO, Any, Protocol

from agentrt.core.errors import MeshError, Reason, Status, invalid, not_found
from agentrt.tools.files.paths import PathRefused, Workspace, open_dir, resolve

CHUNK_BYTES = 1024 * 1024
MAX_MEMBERS = 100_000
MAX_DEPTH = 256


class Peekable(Protocol):
    """A readable stream that can show its first bytes without consuming them."""

    def read(self, size: int = -1, /) -> bytes | None:
        """Read at most size bytes; b"" at the end."""

    def head(self, n: int) -> bytes:
        """The next n bytes (fewer at the end), not consumed."""


@dataclass(frozen=True)
class Unpacked:
    """What an upload wrote: regular files and bytes of their content."""

    files: int
    bytes: int


def _malformed(message: str) -> MeshError:
    return invalid(Reason.MALFORMED_ARCHIVE, message, field="data")


def _outside(message: str) -> MeshError:
    return invalid(Reason.PATH_OUTSIDE_WORKSPACE, message, field="data")


def _path_error(exc: PathRefused, field: str) -> MeshError:
    if exc.reason == "PATH_OUTSIDE_WORKSPACE":
        return invalid(Reason.PATH_OUTSIDE_WORKSPACE, str(exc), field=field)
    return invalid(Reason.INVALID_VALUE, str(exc), field=field)


def relative_path(name: str, where: str) -> str:
    """Normalize a relative archive path ("" for the directory itself).

    Raises:
        MeshError: INVALID_ARGUMENT/PATH_OUTSIDE_WORKSPACE for an absolute path or a `..`
            escape; INVALID_VALUE for a NUL byte.
    """
    if "\x00" in name:
        raise invalid(Reason.INVALID_VALUE, f"{where} contains a NUL byte", field=where)
    if name.startswith("/"):
        raise invalid(Reason.PATH_OUTSIDE_WORKSPACE, f"{where} {name[:200]!r} is absolute", field=where)
    norm = posixpath.normpath(name or ".")
    if norm == ".." or norm.startswith("../"):
        raise invalid(
            Reason.PATH_OUTSIDE_WORKSPACE, f"{where} {name[:200]!r} leaves its directory", field=where
        )
    return "" if norm == "." else norm


def _join(base: str, rel: str) -> str:
    return posixpath.join(base, rel) if base else rel


def open_target_dir(ws: Workspace, base: str) -> int:
    """Open the existing directory base (relative, normalized) of ws; the caller closes it.

    Raises:
        MeshError: INVALID_ARGUMENT/PATH_OUTSIDE_WORKSPACE, or INVALID_VALUE when it is not a
            directory; NOT_FOUND/WORKSPACE_NOT_FOUND when it (or a directory on the way) does
            not exist.
    """
    try:
        res = resolve(ws, base or ".")
        try:
            return open_dir(res)
        finally:
            os.close(res.parent_fd)
    except PathRefused as exc:
        if exc.reason == "NOT_FOUND":
            raise not_found(Reason.WORKSPACE_NOT_FOUND, str(exc), field="target.path") from None
        raise _path_error(exc, "target.path") from None


def unpack(ws: Workspace, base: str, stream: Peekable, limit: int) -> Unpacked:
    """Unpack a tar (plain or gzip, told by its magic bytes) read from stream into ws/base.

    Args:
        ws: the workspace.
        base: the target directory, relative and normalized ("" = the root); created when missing.
        stream: the archive, read in order, never whole.
        limit: most bytes of file content unpacked.

    Raises:
        MeshError: INVALID_ARGUMENT with MALFORMED_ARCHIVE, PATH_OUTSIDE_WORKSPACE,
            REQUEST_TOO_LARGE (content over limit, too many members) or INVALID_VALUE (a
            member that would replace a directory); RESOURCE_EXHAUSTED when the disk is full.
        Whatever stream.read raises (the caller's way to stop).
    """
    try:
        _ensure_dir(ws, base)
    except PathRefused as exc:
        raise _path_error(exc, "target.path") from None
    mode = "r|gz" if stream.head(2) == b"\x1f\x8b" else "r|"
    dest = os.path.join(ws.path, base) if base else ws.path
    files = written = members = 0
    try:
        with tarfile.open(fileobj=stream, mode=mode) as tar:  # type: ignore[call-overload]
            for member in tar:
                members += 1
                if members > MAX_MEMBERS:
                    raise invalid(Reason.REQUEST_TOO_LARGE, f"more than {MAX_MEMBERS} members", field="data")
                name = member.name
                where = f"member {name[:200]!r}"
                if name.startswith("/"):
                    raise _outside(f"{where} has an absolute name")
                try:
                    safe = tarfile.data_filter(member, dest)
                except tarfile.SpecialFileError:
                    raise _malformed(f"{where} is a device file or FIFO; only files, directories "
                                     "and links are unpacked") from None  # fmt: skip
                except tarfile.FilterError as exc:
                    raise _outside(f"{where} refused: {exc}") from None
                rel = relative_path(safe.name, where)
                logical = _join(base, rel)
                if safe.isdir():
                    _ensure_dir(ws, logical)
                elif safe.isreg():
                    if safe.size > limit - written:
                        raise invalid(
                            Reason.REQUEST_TOO_LARGE,
                            f"{where} declares {safe.size} bytes; at most {limit} bytes of content "
                            "are unpacked per archive",
                            field="data",
                            limit_bytes=str(limit),
                        )
                    source = tar.extractfile(member)
                    assert source is not None
                    written += _write_file(ws, logical, source, safe.mode or 0o644, safe.mtime, where)
                    files += 1
                elif safe.issym():
                    link_dir = posixpath.dirname(rel)
                    relative_path(posixpath.join(link_dir, safe.linkname), f"{where} link target")
                    _make_symlink(ws, logical, safe.linkname, where)
                elif safe.islnk():
                    source_rel = relative_path(safe.linkname, f"{where} link target")
                    _make_hardlink(ws, _join(base, source_rel), logical, where)
                else:
                    raise _malformed(f"{where} has an unsupported type")
    except PathRefused as exc:
        raise _path_error(exc, "data") from None
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise _malformed(f"not a readable tar archive (plain or gzip): {exc}") from None
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise MeshError(Status.RESOURCE_EXHAUSTED, Reason.REQUEST_TOO_LARGE, "no space left") from None
        if exc.errno is None:  # an OSError of the decompressor, not of the disk
            raise _malformed(f"not a readable tar archive (plain or gzip): {exc}") from None
        raise invalid(
            Reason.INVALID_VALUE, f"could not unpack: {exc.strerror or exc}", field="data"
        ) from None
    return Unpacked(files, written)


def _ensure_dir(ws: Workspace, logical: str) -> None:
    """Make logical (relative to the workspace) an existing directory, creating what is missing."""
    if not logical:
        return
    res = resolve(ws, logical, create_dirs=True)
    try:
        if res.exists and res.name:
            st = os.stat(res.name, dir_fd=res.parent_fd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                raise PathRefused(f"{res.logical!r} exists and is not a directory", "NOT_A_DIRECTORY")
            return
        if res.name:
            os.mkdir(res.name, 0o755, dir_fd=res.parent_fd)
            if ws.uid is not None and ws.gid is not None:
                os.chown(res.name, ws.uid, ws.gid, dir_fd=res.parent_fd, follow_symlinks=False)
    finally:
        os.close(res.parent_fd)


def _replaceable(res: Any, where: str) -> None:
    """Refuse replacing a directory with a non-directory; remove any other existing entry."""
    if not res.name:
        raise invalid(Reason.INVALID_VALUE, f"{where} names the target directory itself", field="data")
    if res.exists:
        st = os.stat(res.name, dir_fd=res.parent_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            raise invalid(
                Reason.INVALID_VALUE, f"{where} would replace the directory {res.logical!r}", field="data"
            )


def _write_file(ws: Workspace, logical: str, source: IO[bytes], mode: int, mtime: float, where: str) -> int:
    res = resolve(ws, logical, create_dirs=True, follow_last=False)
    try:
        _replaceable(res, where)
        tmp = f".{res.name[:100]}.agentrt-{secrets.token_hex(6)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=res.parent_fd)  # fmt: skip
        try:
            size = 0
            try:
                while chunk := source.read(CHUNK_BYTES):
                    view = memoryview(chunk)
                    while view:
                        view = view[os.write(fd, view) :]
                    size += len(chunk)
                os.fchmod(fd, mode & 0o755 | 0o600)
                ws.chown(fd)
                with contextlib.suppress(OSError, ValueError, OverflowError):
                    os.utime(fd, (mtime, mtime))
            finally:
                os.close(fd)
            os.rename(tmp, res.name, src_dir_fd=res.parent_fd, dst_dir_fd=res.parent_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=res.parent_fd)
            raise
        return size
    finally:
        os.close(res.parent_fd)


def _make_symlink(ws: Workspace, logical: str, target: str, where: str) -> None:
    res = resolve(ws, logical, create_dirs=True, follow_last=False)
    try:
        _replaceable(res, where)
        if res.exists:
            os.unlink(res.name, dir_fd=res.parent_fd)
        os.symlink(target, res.name, dir_fd=res.parent_fd)
        if ws.uid is not None and ws.gid is not None:
            os.chown(res.name, ws.uid, ws.gid, dir_fd=res.parent_fd, follow_symlinks=False)
    finally:
        os.close(res.parent_fd)


def _make_hardlink(ws: Workspace, source: str, logical: str, where: str) -> None:
    src = resolve(ws, source, follow_last=False)
    try:
        st = (
            os.stat(src.name, dir_fd=src.parent_fd, follow_symlinks=False)
            if src.name and src.exists
            else None
        )
        if st is None or not stat.S_ISREG(st.st_mode):
            raise _malformed(f"{where} links to {source!r}, which is not a file unpacked before it")
        dst = resolve(ws, logical, create_dirs=True, follow_last=False)
        try:
            _replaceable(dst, where)
            if dst.exists:
                os.unlink(dst.name, dir_fd=dst.parent_fd)
            os.link(
                src.name, dst.name, src_dir_fd=src.parent_fd, dst_dir_fd=dst.parent_fd, follow_symlinks=False
            )
        finally:
            os.close(dst.parent_fd)
    finally:
        os.close(src.parent_fd)


class _Exact(io.RawIOBase):
    """Exactly `size` bytes of an open file: cut when it grew, zero-padded when it shrank."""

    def __init__(self, fd: int, size: int) -> None:
        self._fd, self._left = fd, size

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = min(len(b), self._left)
        if n <= 0:
            return 0
        data = os.read(self._fd, n) or bytes(n)
        b[: len(data)] = data
        self._left -= len(data)
        return len(data)


def pack(dir_fd: int, out: IO[bytes], gzip: bool) -> None:
    """Write a PAX tar (gzip when asked) of the tree under dir_fd to out; closes dir_fd.

    Entries are named relative to the directory, in name order, directories before their
    contents; symlinks are stored, never followed; FIFOs, sockets and devices are skipped;
    hard links are stored as files.

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE for a tree deeper than MAX_DEPTH.
        Whatever out.write raises (the caller's way to stop).
    """
    try:
        tar = tarfile.open(fileobj=out, mode="w|gz" if gzip else "w|", format=tarfile.PAX_FORMAT)  # type: ignore[call-overload]
    except BaseException:
        os.close(dir_fd)
        raise
    with tar:
        _pack_tree(tar, dir_fd)


def _pack_tree(tar: tarfile.TarFile, root_fd: int) -> None:
    """Add the tree under root_fd (closed at the end), depth first, without following links."""
    stack: list[tuple[int, str, list[str]]] = [(root_fd, "", _names(root_fd))]
    try:
        while stack:
            fd, prefix, names = stack[-1]
            if not names:
                os.close(fd)
                stack.pop()
                continue
            name = names.pop()
            entry = prefix + name
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue  # vanished while packing
            info = tarfile.TarInfo(entry)
            info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
            if stat.S_ISDIR(st.st_mode):
                if len(stack) >= MAX_DEPTH:
                    raise invalid(
                        Reason.INVALID_VALUE,
                        f"{entry!r} is nested deeper than {MAX_DEPTH} levels; download it on its own",
                        field="target.path",
                    )
                try:
                    sub = os.open(
                        name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd
                    )
                except OSError:
                    continue
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                stack.append((sub, entry + "/", _names(sub)))
            elif stat.S_ISLNK(st.st_mode):
                try:
                    info.linkname = os.readlink(name, dir_fd=fd)
                except OSError:
                    continue
                info.type, info.mode = tarfile.SYMTYPE, 0o777
                tar.addfile(info)
            elif stat.S_ISREG(st.st_mode):
                _pack_file(tar, info, fd, name)
    finally:
        for fd, _, _ in stack:
            os.close(fd)


def _names(dir_fd: int) -> list[str]:
    """Entry names of a directory, reversed so that pop() yields them in name order."""
    with os.scandir(dir_fd) as it:
        return sorted((e.name for e in it), reverse=True)


def _pack_file(tar: tarfile.TarFile, info: tarfile.TarInfo, dir_fd: int, name: str) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return  # vanished, or swapped for a link
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        info.size = st.st_size
        tar.addfile(info, _Exact(fd, st.st_size))
    finally:
        os.close(fd)
