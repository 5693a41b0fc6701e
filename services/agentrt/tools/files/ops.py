"""The in-process file tools: read_file, write_file, list_files (no process is spawned).

Every path goes through `paths.resolve`, so nothing outside the workspace is read or
written, symlinks included. The functions are synchronous and are run on a worker thread
by the executor so the event loop never blocks on a disk.

Invariants:
- read_file opens with O_NOFOLLOW|O_NONBLOCK and reads regular files only (a FIFO a
  command planted cannot hang the service); output is capped head+tail like a command's.
- write_file writes a temporary file beside the target and renames it over, so it never
  writes through a hard link or a symlink into another file; new files and directories
  are given to the workspace's uid; an existing file keeps its mode and owner.
- list_files never descends through a symlink and lists at most MAX_ENTRIES entries.
"""

from __future__ import annotations

import os
import secrets
import stat
from typing import Any

from agentrt.core.truncate import head_tail
from agentrt.tools.calls import args as A
from agentrt.tools.calls.output import marker
from agentrt.tools.calls.results import Outcome
from agentrt.tools.files.paths import PathRefused, Workspace, open_dir, resolve

MAX_ENTRIES = 1000
_BINARY_SNIFF = 8192


def read_file(ws: Workspace, args: dict[str, Any], cap_bytes: int) -> Outcome:
    """Return a file's text, head and tail kept when larger than cap_bytes.

    Args:
        ws: the workspace.
        args: {"path": string}.
        cap_bytes: most bytes of UTF-8 text returned, the marker of a cut included.

    Raises:
        ArgError: path missing or not a string.
        PathRefused: the path escapes, or names no regular file.
    """
    logical, fd = _open_existing(ws, A.required_str(args, "path"))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise PathRefused(f"{logical!r} is a directory; use list_files", "NOT_A_FILE")
        if not stat.S_ISREG(st.st_mode):
            raise PathRefused(f"{logical!r} is not a regular file", "NOT_A_FILE")
        size = st.st_size
        if size <= cap_bytes:
            head, tail = _read(fd, 0, size), b""
            size = len(head)  # what was read is the whole file (it may have changed since fstat)
        else:
            half = cap_bytes // 2
            head = _read(fd, 0, cap_bytes - half)
            tail = _read(fd, size - half, half)
    finally:
        os.close(fd)
    details = {"path": logical, "size_bytes": size}
    if b"\x00" in head[:_BINARY_SNIFF]:
        return Outcome(
            content=f"[{logical} is a binary file of {size} bytes; not shown]",
            summary=f"binary file {logical}",
            details=details,
        )
    # At most cap_bytes bytes of text, the marker included, cut on character boundaries.
    text, truncated = head_tail(head, tail, size, cap_bytes, marker)
    return Outcome(
        content=text,
        summary=f"read {logical} ({size} bytes)",
        details=details,
        output_truncated=truncated,
    )


def _read(fd: int, offset: int, length: int) -> bytes:
    chunks, left = [], length
    while left > 0:
        chunk = os.pread(fd, min(left, 1 << 20), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def write_file(ws: Workspace, args: dict[str, Any]) -> Outcome:
    """Write a file (creating missing directories), replacing it atomically when it exists.

    Args:
        ws: the workspace.
        args: {"path": string, "content": string}.

    Raises:
        ArgError: path or content missing or of the wrong type.
        PathRefused: the path escapes, or names a directory.
    """
    path = A.required_str(args, "path")
    data = A.string(args, "content").encode("utf-8")
    logical, created = write_bytes(ws, path, data)
    verb = "created" if created else "replaced"
    return Outcome(
        content=f"{verb} {logical} ({len(data)} bytes)",
        summary=f"{verb} {logical}",
        details={"path": logical, "size_bytes": len(data), "created": created},
    )


def write_bytes(ws: Workspace, path: str, data: bytes) -> tuple[str, bool]:
    """Write data to path inside ws through a temporary file renamed over the target.

    Returns:
        (path relative to the workspace, True when the file was created).

    Raises:
        PathRefused: the path escapes, or names a directory.
    """
    res = resolve(ws, path, create_dirs=True)
    try:
        if not res.name:
            raise PathRefused("path names the workspace itself, not a file", "NOT_A_FILE")
        existing = None
        if res.exists:
            existing = os.stat(res.name, dir_fd=res.parent_fd, follow_symlinks=False)
            if stat.S_ISDIR(existing.st_mode):
                raise PathRefused(f"{res.logical!r} is a directory", "NOT_A_FILE")
        tmp = f".{res.name[:100]}.agentrt-{secrets.token_hex(6)}.tmp"
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
            dir_fd=res.parent_fd,
        )
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if existing is not None and stat.S_ISREG(existing.st_mode):
                    os.fchmod(fd, stat.S_IMODE(existing.st_mode))
                    if ws.uid is not None:
                        os.fchown(fd, existing.st_uid, existing.st_gid)
                else:
                    ws.chown(fd)
            finally:
                os.close(fd)
            os.rename(tmp, res.name, src_dir_fd=res.parent_fd, dst_dir_fd=res.parent_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=res.parent_fd)
            except OSError:
                pass
            raise
    finally:
        os.close(res.parent_fd)
    return res.logical, existing is None


def read_bytes(ws: Workspace, path: str, limit_bytes: int) -> tuple[str, bytes]:
    """Return (relative path, content) of a regular file of at most limit_bytes bytes.

    Raises:
        PathRefused: the path escapes, is missing, is not a regular file, or is too large.
    """
    logical, fd = _open_existing(ws, path)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise PathRefused(f"{logical!r} is not a regular file", "NOT_A_FILE")
        if st.st_size > limit_bytes:
            raise PathRefused(f"{logical!r} is larger than {limit_bytes} bytes", "TOO_LARGE")
        return logical, _read(fd, 0, st.st_size)
    finally:
        os.close(fd)


def exists(ws: Workspace, path: str) -> bool:
    """True when path names something inside ws (a symlink counts as itself).

    Raises:
        PathRefused: the path escapes the workspace.
    """
    try:
        res = resolve(ws, path, follow_last=False)
    except PathRefused as exc:
        if exc.reason == "NOT_FOUND":
            return False
        raise
    os.close(res.parent_fd)
    return res.exists and bool(res.name)


def delete_file(ws: Workspace, path: str) -> str:
    """Remove a file (or a symlink itself) inside ws; return its relative path.

    Raises:
        PathRefused: the path escapes, is missing, or is a directory.
    """
    res = resolve(ws, path, follow_last=False)
    try:
        if not res.name or not res.exists:
            raise PathRefused(f"file {res.logical!r} does not exist", "NOT_FOUND")
        st = os.stat(res.name, dir_fd=res.parent_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            raise PathRefused(f"{res.logical!r} is a directory", "NOT_A_FILE")
        os.unlink(res.name, dir_fd=res.parent_fd)
    finally:
        os.close(res.parent_fd)
    return res.logical


def list_files(ws: Workspace, args: dict[str, Any]) -> Outcome:
    """List a directory: one entry per line, "/" after directories, "-> target" for symlinks.

    Args:
        ws: the workspace.
        args: {"path"?: string (default the workspace), "recursive"?: boolean}.

    Raises:
        ArgError: a field of the wrong type.
        PathRefused: the path escapes, or names no directory.
    """
    path = A.optional_str(args, "path") or "."
    recursive = A.optional_bool(args, "recursive")
    res = resolve(ws, path)
    try:
        dir_fd = open_dir(res)
    finally:
        os.close(res.parent_fd)
    lines: list[str] = []
    more = _walk(dir_fd, "", recursive, lines)
    if more:
        lines.append(f"[... more entries not shown; listing stops at {MAX_ENTRIES}]")
    content = "\n".join(lines) if lines else "(empty directory)"
    return Outcome(
        content=content,
        summary=f"listed {res.logical} ({len(lines)} entries)",
        details={"path": res.logical, "entries": len(lines), "truncated": more},
        output_truncated=more,
    )


def _walk(dir_fd: int, prefix: str, recursive: bool, lines: list[str]) -> bool:
    """Append entries under dir_fd to lines (closing dir_fd); return True when cut short."""
    try:
        with os.scandir(dir_fd) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            if len(lines) >= MAX_ENTRIES:
                return True
            name = prefix + entry.name
            if entry.is_symlink():
                try:
                    target = os.readlink(entry.name, dir_fd=dir_fd)
                except OSError:
                    target = "?"
                lines.append(f"{name} -> {target}")
            elif entry.is_dir(follow_symlinks=False):
                lines.append(name + "/")
                if recursive:
                    try:
                        sub = os.open(
                            entry.name,
                            os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                            dir_fd=dir_fd,
                        )
                    except OSError:
                        continue
                    if _walk(sub, name + "/", True, lines):
                        return True
            else:
                lines.append(name)
        return False
    finally:
        os.close(dir_fd)


def _open_existing(ws: Workspace, path: str) -> tuple[str, int]:
    """Open an existing file of ws for reading; return (relative path, fd). The caller closes fd.

    O_NOFOLLOW|O_NONBLOCK: a symlink planted as the last component is refused, and a FIFO
    cannot hang the service.

    Raises:
        PathRefused: the path escapes, names nothing, or cannot be opened.
    """
    res = resolve(ws, path)
    try:
        if not res.name or not res.exists:
            raise PathRefused(f"file {res.logical!r} does not exist", "NOT_FOUND")
        try:
            fd = os.open(
                res.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=res.parent_fd
            )
        except OSError as exc:
            raise PathRefused(f"cannot open {res.logical!r}: {exc.strerror}", "INVALID_PATH") from exc
    finally:
        os.close(res.parent_fd)
    return res.logical, fd
