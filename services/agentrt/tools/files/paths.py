"""Workspaces and path confinement: no file tool reaches outside its workspace.

A `Workspace` is a real (symlink-free) absolute directory plus the uid/gid its commands
run as. `open_workspace` opens an already checked directory (`workspaces.WorkspaceRules`
says which may be used) without following a symlink in its last component (nor in any
component below the workspace root), creates it when missing and, when the service is
root, hands a directory it created (and only such a one) to an unprivileged uid (see
docs/services/tools.md).

`resolve` walks a path one component at a time from a descriptor of the workspace root,
with O_NOFOLLOW on every open: a symlink is expanded by hand and followed only while the
path it names stays inside the workspace; `..` may not climb above the root. Because every
step is an openat from the previous step's descriptor, a command that swaps a directory
for a symlink between two steps makes the walk fail, never escape. Refusals raise
`PathRefused`, which the file tools turn into an is_error result.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from agentrt.core.errors import Reason, invalid, not_found, quote

_MAX_SYMLINK_HOPS = 40
#: Longest path accepted, and longest name in it, in bytes of UTF-8 (Linux PATH_MAX and
#: NAME_MAX): longer ones could never be opened, and are refused before any syscall.
MAX_PATH_BYTES = 4096
MAX_NAME_BYTES = 255
#: Most components of a path a tool or an archive names (DownloadWorkspace's own depth bound).
MAX_PATH_DEPTH = 256
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class PathRefused(Exception):
    """A path the file tools will not touch; `str()` is model-readable.

    Attributes:
        reason: "PATH_OUTSIDE_WORKSPACE" for an escape, "NOT_FOUND" for a missing
            directory, "NOT_A_DIRECTORY", or "INVALID_PATH".
    """

    def __init__(self, message: str, reason: str = "PATH_OUTSIDE_WORKSPACE") -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Workspace:
    """A validated workspace directory.

    Attributes:
        path: real absolute path on the service's host.
        uid: uid commands run as and files are given to; None when the service is not root
            (commands then run as the service's own user and nothing is chowned).
        gid: gid paired with uid.
        writable: whether uid may create entries in the directory (False for a root-owned
            directory the service did not create; see `open_workspace`).
    """

    path: str
    uid: int | None = None
    gid: int | None = None
    writable: bool = True

    def chown(self, fd: int) -> None:
        """Give an object the tools created to the workspace's uid (no-op when not root)."""
        if self.uid is not None and self.gid is not None:
            os.fchown(fd, self.uid, self.gid)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _writable_by(st: os.stat_result, uid: int, gid: int) -> bool:
    """Whether uid:gid may create entries in a directory, by its mode bits (ACLs not consulted)."""
    if st.st_uid == uid:
        bits = st.st_mode >> 6
    elif st.st_gid == gid:
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return bits & 0o3 == 0o3


def _open_below(base: str, rel: str, create: bool) -> tuple[int, bool]:
    """Open base/rel as a directory without following any symlink below base.

    Each component is opened with O_NOFOLLOW from the previous one's descriptor and made
    (mode 0755) when missing and create is set. Returns (descriptor, whether the last
    component was made by this call).

    Raises:
        MeshError: NOT_FOUND/WORKSPACE_NOT_FOUND when missing and not create;
            INVALID_ARGUMENT/INVALID_VALUE for a component that is a symlink or no directory.
    """
    if create:
        os.makedirs(base, mode=0o755, exist_ok=True)
    comps = [c for c in rel.split("/") if c not in ("", ".")]
    try:
        fd = os.open(base, _READ_DIR)
    except FileNotFoundError as exc:
        raise not_found(
            Reason.WORKSPACE_NOT_FOUND, f"workspace {quote(base, 256)} does not exist", field="workspace"
        ) from exc
    made = False
    try:
        for comp in comps:
            if comp == "..":
                raise invalid(
                    Reason.INVALID_VALUE,
                    f"workspace {quote(rel, 256)} leaves {quote(base, 256)}",
                    field="workspace",
                )
            made = False
            if create:
                try:
                    os.mkdir(comp, 0o755, dir_fd=fd)
                    made = True
                except FileExistsError:
                    pass
            try:
                nxt = os.open(comp, _READ_DIR | os.O_NOFOLLOW, dir_fd=fd)
            except FileNotFoundError as exc:
                raise not_found(
                    Reason.WORKSPACE_NOT_FOUND,
                    f"workspace {quote(os.path.join(base, rel), 256)} does not exist",
                    field="workspace",
                ) from exc
            except OSError as exc:  # ELOOP (a symlink) or ENOTDIR
                raise invalid(
                    Reason.INVALID_VALUE,
                    f"workspace {quote(os.path.join(base, rel), 256)}: {quote(comp, 256)} is a symlink "
                    "or not a directory",
                    field="workspace",
                ) from exc
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd, made


def _open_leaf(path: str, create: bool) -> tuple[int, bool]:
    """Open path (already resolved, its parent existing) as a directory; make it when missing.

    The last component is never followed: a symlink there (swapped in after the checks)
    is refused. Returns (descriptor, whether this call made the directory).
    """
    made = False
    if create:
        try:
            os.mkdir(path, 0o755)
            made = True
        except FileExistsError:
            pass
        except OSError as exc:
            raise invalid(
                Reason.INVALID_VALUE, f"workspace {quote(path, 256)}: {exc.strerror}", field="workspace"
            ) from exc
    try:
        return os.open(path, _READ_DIR | os.O_NOFOLLOW), made
    except FileNotFoundError as exc:
        raise not_found(
            Reason.WORKSPACE_NOT_FOUND, f"workspace {quote(path, 256)} does not exist", field="workspace"
        ) from exc
    except OSError as exc:
        raise invalid(
            Reason.INVALID_VALUE,
            f"workspace {quote(path, 256)} is not a directory (or is a symlink)",
            field="workspace",
        ) from exc


def open_workspace(
    path: str,
    *,
    make_parents: bool,
    sandbox_uid: int,
    sandbox_gid: int,
    base: str = "",
    create: bool = True,
    check: Callable[[str], None] | None = None,
) -> Workspace:
    """Open (creating it when missing and create is set) and prepare a workspace directory.

    Ownership (docs/services/tools.md "Workspaces and sandboxes"): when the service runs
    as root, a directory this call creates is chowned (itself, not its contents) to
    sandbox_uid:gid and commands run as that; an existing directory is NEVER chowned:
    commands run as its owner when that is not root, else as sandbox_uid:gid, and the
    workspace is then marked not `writable` when its mode bits do not let that uid write
    (exec_command refuses such a workspace). A root-run command is never possible.

    Args:
        path: an absolute path; for an explicit workspace one `check` (and the caller's
            checks) accept.
        make_parents: create missing parents (a trusted path such as the probe's).
        sandbox_uid: the unprivileged uid for directories the service creates.
        sandbox_gid: its gid.
        base: when set, path lies inside this trusted directory (the workspace root) and
            every component below it is walked without following symlinks.
        create: make the directory when missing; False (downloads) answers NOT_FOUND.
        check: called with the real path of the opened directory; raises to refuse it
            (catches a component swapped for a symlink between the checks and the open).

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE (not a directory, a symlink, refused by
            check); NOT_FOUND/WORKSPACE_NOT_FOUND when missing and not create.
    """
    if base:
        fd, made = _open_below(base, os.path.relpath(path, base), create)
    else:
        if make_parents and create:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
        fd, made = _open_leaf(path, create)
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
        if check is not None:
            try:
                check(real)
            except BaseException:
                if made:  # made through a component swapped under us: take it back
                    with contextlib.suppress(OSError):
                        os.rmdir(real)
                raise
        if os.geteuid() != 0:
            return Workspace(real)
        st = os.fstat(fd)
        if made and st.st_uid == 0:
            os.fchown(fd, sandbox_uid, sandbox_gid)
            return Workspace(real, sandbox_uid, sandbox_gid)
        uid, gid = (st.st_uid, st.st_gid) if st.st_uid != 0 else (sandbox_uid, sandbox_gid)
        return Workspace(real, uid, gid, _writable_by(st, uid, gid))
    finally:
        os.close(fd)


@dataclass
class Resolved:
    """Where a path landed: the open parent directory and the final name in it.

    Attributes:
        parent_fd: O_PATH descriptor of the parent directory (the caller closes it).
        name: final component; "" when the path is the workspace root itself.
        logical: path relative to the workspace ("." for the root), for messages.
        exists: whether `name` exists (as a non-symlink) in the parent.
    """

    parent_fd: int
    name: str
    logical: str
    exists: bool


def _check_name(name: str) -> None:
    size = len(name.encode("utf-8", "surrogateescape"))
    if size > MAX_NAME_BYTES:
        raise PathRefused(
            f"the name {name[:40]!r}… is {size} bytes long; a file or directory name takes at most "
            f"{MAX_NAME_BYTES} bytes",
            "INVALID_PATH",
        )


def _components(workspace: str, user_path: str) -> list[str]:
    if "\x00" in user_path:
        raise PathRefused("path contains a NUL byte", "INVALID_PATH")
    size = len(user_path.encode("utf-8", "surrogateescape"))
    if size > MAX_PATH_BYTES:
        raise PathRefused(
            f"the path is {size} bytes long; a path takes at most {MAX_PATH_BYTES} bytes", "INVALID_PATH"
        )
    if os.path.isabs(user_path):
        if not _inside(user_path, workspace):
            raise PathRefused(f"path {user_path!r} is outside the workspace")
        user_path = user_path[len(workspace) :]
    parts = [c for c in user_path.split("/") if c not in ("", ".")]
    if len(parts) > MAX_PATH_DEPTH:
        raise PathRefused(
            f"the path has {len(parts)} components; a path has at most {MAX_PATH_DEPTH}", "INVALID_PATH"
        )
    return parts


def resolve(
    ws: Workspace, user_path: str, *, create_dirs: bool = False, follow_last: bool = True
) -> Resolved:
    """Resolve user_path inside ws without ever leaving it (see the module docstring).

    Args:
        ws: the workspace.
        user_path: relative to the workspace, or absolute inside it.
        create_dirs: create missing intermediate directories (given to ws's uid).
        follow_last: expand a symlink in the final component (False names the link itself).

    Returns:
        The parent descriptor and final name; the final name itself may not exist.

    Raises:
        PathRefused: the path escapes, loops, crosses a non-directory, or is longer than
            MAX_PATH_BYTES, deeper than MAX_PATH_DEPTH, or holds a name longer than
            MAX_NAME_BYTES: reason INVALID_PATH.
    """
    pending = _components(ws.path, user_path)
    root_fd = os.open(ws.path, _DIR_FLAGS)
    stack = [root_fd]
    names: list[str] = []
    hops = 0
    try:
        while pending:
            comp = pending.pop(0)
            if comp == ".":
                continue
            _check_name(comp)
            if comp == "..":
                if not names:
                    raise PathRefused(f"path {user_path!r} is outside the workspace")
                os.close(stack.pop())
                names.pop()
                continue
            try:
                st = os.stat(comp, dir_fd=stack[-1], follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None and stat.S_ISLNK(st.st_mode) and (pending or follow_last):
                hops += 1
                if hops > _MAX_SYMLINK_HOPS:
                    raise PathRefused(
                        f"path {user_path!r} has too many levels of symbolic links", "INVALID_PATH"
                    )
                target = os.readlink(comp, dir_fd=stack[-1])
                if os.path.isabs(target):
                    if not _inside(os.path.normpath(target), ws.path):
                        raise PathRefused(f"path {user_path!r} leads outside the workspace through a symlink")
                    for fd in stack[1:]:
                        os.close(fd)
                    del stack[1:]
                    names.clear()
                    pending = _components(ws.path, os.path.normpath(target)) + pending
                else:
                    pending = [c for c in target.split("/") if c] + pending
                continue
            if not pending:
                logical = "/".join([*names, comp])
                return Resolved(os.dup(stack[-1]), comp, logical, st is not None)
            if st is None:
                if not create_dirs:
                    raise PathRefused(f"directory {'/'.join([*names, comp])!r} does not exist", "NOT_FOUND")
                os.mkdir(comp, 0o755, dir_fd=stack[-1])
                fd = os.open(comp, _DIR_FLAGS, dir_fd=stack[-1])
                if ws.uid is not None and ws.gid is not None:
                    os.chown(comp, ws.uid, ws.gid, dir_fd=stack[-1], follow_symlinks=False)
            elif not stat.S_ISDIR(st.st_mode):
                raise PathRefused(f"{'/'.join([*names, comp])!r} is not a directory", "NOT_A_DIRECTORY")
            else:
                try:
                    fd = os.open(comp, _DIR_FLAGS, dir_fd=stack[-1])
                except OSError as exc:
                    # Swapped for a symlink (ELOOP) or a file (ENOTDIR) under our feet.
                    raise PathRefused(
                        f"{'/'.join([*names, comp])!r} changed while resolving", "INVALID_PATH"
                    ) from exc
            stack.append(fd)
            names.append(comp)
        # The path named a directory reached through components (or the root itself).
        parent_fd = os.dup(stack[-2]) if len(stack) > 1 else os.dup(stack[0])
        name = names[-1] if names else ""
        return Resolved(parent_fd, name, "/".join(names) or ".", True)
    finally:
        for fd in stack:
            os.close(fd)


def open_dir(resolved: Resolved) -> int:
    """Open the directory a Resolved names for reading (O_NOFOLLOW); the caller closes it.

    Raises:
        PathRefused: it does not exist, or is not a directory.
    """
    try:
        if not resolved.name:
            return os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=resolved.parent_fd)
        return os.open(
            resolved.name,
            os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
            dir_fd=resolved.parent_fd,
        )
    except FileNotFoundError as exc:
        raise PathRefused(f"directory {resolved.logical!r} does not exist", "NOT_FOUND") from exc
    except (NotADirectoryError, OSError) as exc:
        raise PathRefused(f"{resolved.logical!r} is not a directory", "NOT_A_DIRECTORY") from exc


def resolve_dir(ws: Workspace, user_path: str) -> str:
    """Return the host path of an existing directory inside ws (a command's workdir).

    Raises:
        PathRefused: it escapes, does not exist, or is not a directory.
    """
    res = resolve(ws, user_path or ".")
    try:
        fd = open_dir(res)
        os.close(fd)
    finally:
        os.close(res.parent_fd)
    return ws.path if res.logical == "." else os.path.join(ws.path, res.logical)
