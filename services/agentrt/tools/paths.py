"""Workspaces and path confinement: no file tool reaches outside its workspace.

A `Workspace` is a real (symlink-free) absolute directory plus the uid/gid its commands
run as. `open_workspace` validates a requested directory (absolute, parent exists, not a
system directory or the service's own state), creates it when missing and, when the
service is root, hands it to an unprivileged uid (see docs/services/tools.md).

`resolve` walks a path one component at a time from a descriptor of the workspace root,
with O_NOFOLLOW on every open: a symlink is expanded by hand and followed only while the
path it names stays inside the workspace; `..` may not climb above the root. Because every
step is an openat from the previous step's descriptor, a command that swaps a directory
for a symlink between two steps makes the walk fail, never escape. Refusals raise
`PathRefused`, which the file tools turn into an is_error result.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

from agentrt.core.errors import Reason, invalid

_MAX_SYMLINK_HOPS = 40
_DIR_FLAGS = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: A workspace may not be one of these or contain one (it would bind them writable).
_SYSTEM_ROOTS = (
    "/",
    "/usr",
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/proc",
    "/sys",
    "/dev",
    "/run",
    "/var",
    "/root",
    "/home",
    "/tmp",
    "/opt",
    "/srv",
    "/mnt",
)
#: A workspace may not live inside these.
_SYSTEM_TREES = (
    "/usr",
    "/etc",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/boot",
    "/proc",
    "/sys",
    "/dev",
    "/run",
)


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
    """

    path: str
    uid: int | None = None
    gid: int | None = None

    def chown(self, fd: int) -> None:
        """Give an object the tools created to the workspace's uid (no-op when not root)."""
        if self.uid is not None and self.gid is not None:
            os.fchown(fd, self.uid, self.gid)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def check_workspace_path(
    path: str, protected: tuple[str, ...] = (), allowed_roots: tuple[str, ...] = ()
) -> str:
    """Validate a requested workspace path and return it normalized.

    Args:
        path: the requested absolute path.
        protected: service directories (its state dir) a workspace may neither be nor
            contain nor live inside, unless inside one of allowed_roots.
        allowed_roots: directories inside `protected` where workspaces are fine (the
            workspace root).

    Raises:
        MeshError: INVALID_ARGUMENT/INVALID_VALUE for a relative path, a NUL byte, a system
            directory, the service's own state, or a missing parent directory.
    """
    if not path or "\x00" in path or not os.path.isabs(path):
        raise invalid(
            Reason.INVALID_VALUE, f"workspace must be an absolute path, not {path!r}", field="workspace"
        )
    norm = os.path.normpath(path)
    parent = os.path.dirname(norm)
    real = os.path.join(os.path.realpath(parent), os.path.basename(norm)) if norm != "/" else "/"
    for candidate in {norm, real}:
        for root in _SYSTEM_ROOTS:
            if _inside(root, candidate):
                raise invalid(
                    Reason.INVALID_VALUE, f"workspace {path!r} would expose {root}", field="workspace"
                )
        for tree in _SYSTEM_TREES:
            if _inside(candidate, tree):
                raise invalid(
                    Reason.INVALID_VALUE, f"workspace {path!r} is a system directory", field="workspace"
                )
        for guarded in protected:
            if _inside(guarded, candidate) or (
                _inside(candidate, guarded) and not any(_inside(candidate, ok) for ok in allowed_roots)
            ):
                raise invalid(
                    Reason.INVALID_VALUE,
                    f"workspace {path!r} contains or lies inside the service's state directory "
                    f"{guarded!r} (its databases); use another directory, or move the state "
                    "with AGENTRT_STATE_DIR",
                    field="workspace",
                )
    if not os.path.isdir(parent):
        raise invalid(Reason.INVALID_VALUE, f"workspace parent {parent!r} does not exist", field="workspace")
    return norm


def open_workspace(path: str, *, make_parents: bool, sandbox_uid: int, sandbox_gid: int) -> Workspace:
    """Create (when missing) and prepare an already validated workspace directory.

    When the service runs as root, commands run as the directory's owner if that is not
    root, else the directory is chowned (itself, not its contents) to sandbox_uid:gid and
    commands run as that; a root-run command is never possible.

    Args:
        path: a path that passed `check_workspace_path`.
        make_parents: create missing parents (the service's own workspace root).
        sandbox_uid: the unprivileged uid for root-owned workspaces.
        sandbox_gid: its gid.

    Raises:
        MeshError: INVALID_VALUE when the path exists and is not a directory.
    """
    try:
        if make_parents:
            os.makedirs(path, mode=0o755, exist_ok=True)
        elif not os.path.isdir(path):
            os.mkdir(path, 0o755)
    except FileExistsError as exc:
        raise invalid(
            Reason.INVALID_VALUE, f"workspace {path!r} is not a directory", field="workspace"
        ) from exc
    except OSError as exc:
        raise invalid(Reason.INVALID_VALUE, f"workspace {path!r}: {exc.strerror}", field="workspace") from exc
    real = os.path.realpath(path)
    if not os.path.isdir(real):
        raise invalid(Reason.INVALID_VALUE, f"workspace {path!r} is not a directory", field="workspace")
    if os.geteuid() != 0:
        return Workspace(real)
    st = os.stat(real)
    if st.st_uid != 0:
        return Workspace(real, st.st_uid, st.st_gid)
    os.chown(real, sandbox_uid, sandbox_gid)
    return Workspace(real, sandbox_uid, sandbox_gid)


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


def _components(workspace: str, user_path: str) -> list[str]:
    if "\x00" in user_path:
        raise PathRefused("path contains a NUL byte", "INVALID_PATH")
    if os.path.isabs(user_path):
        if not _inside(user_path, workspace):
            raise PathRefused(f"path {user_path!r} is outside the workspace")
        user_path = user_path[len(workspace) :]
    return [c for c in user_path.split("/") if c not in ("", ".")]


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
        PathRefused: the path escapes, loops, or crosses a non-directory.
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
