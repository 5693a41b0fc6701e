"""Which directories may be a workspace (docs/services/tools.md "Workspaces and sandboxes").

A workspace is bound writable into every command and, as root, a directory the service
creates for it is handed to an unprivileged uid: a workspace that is (or lies in) a system
directory would give commands the host. `WorkspaceRules.check` validates a requested path,
both as written and fully resolved (every symlink, the last component included), and
refuses:
- the root and every top-level directory (`/tmp`, `/home`, `/srv`, `/work` ... are mount
  points or system trees; `/tmp/<x>`, `/srv/<x>`, `/work/<x>`, `/data/<x>` are fine);
- anything in a system tree (`SYSTEM_TREES`: `/usr`, `/etc`, `/var`, `/run`, `/root`,
  `/opt` ...) and a home directory itself (`/home/<user>`; `/home/<user>/<x>` is fine);
- anything that contains or lies inside the service's state directory (its databases);
- inside the service's workspace root: anything not strictly inside the caller's tenant
  directory `<root>/<tenant>/` (the root itself, another tenant's tree), and that
  directory's `runs` and `sandboxes` (they hold every run's and sandbox's workspace).
The service's own workspace root may lie in a system tree (`/var/lib/agentrt/...`): the
operator chose it, and the tenant rule governs paths inside it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from agentrt.core.errors import Reason, invalid, quote

#: A workspace may neither be nor lie inside these: system software, state and devices.
SYSTEM_TREES = (
    "/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/lost+found", "/nix",
    "/opt", "/proc", "/root", "/run", "/sbin", "/snap", "/sys", "/usr", "/var",
)  # fmt: skip
#: Directories whose direct children (home directories) are refused too.
HOME_PARENTS = ("/home",)
#: Directories of the service's own layout inside `<root>/<tenant>/`.
SERVICE_DIRS = ("runs", "sandboxes")


def inside(path: str, root: str) -> bool:
    """True when path is root or lies below it (both normalized absolute paths)."""
    return path == root or path.startswith(root.rstrip("/") + "/")


@dataclass(frozen=True)
class WorkspaceRules:
    """The workspace rules of one service (see the module docstring).

    Attributes:
        roots: the workspace root, real and as configured (they differ through a symlink).
        protected: directories a workspace may neither be, contain nor lie inside unless
            it is inside a root (the state directory).
    """

    roots: tuple[str, ...]
    protected: tuple[str, ...] = ()

    def problem(self, path: str, tenant: str) -> str | None:
        """Why the normalized absolute path may not be tenant's workspace, or None."""
        for root in self.roots:
            if inside(path, root):
                mine = os.path.join(root, tenant)
                if path == mine or not inside(path, mine):
                    return (
                        "lies in the tool service's workspace root outside this tenant's own "
                        f"directory; a workspace there must lie inside {mine + '/'!r}"
                    )
                if any(path == os.path.join(mine, d) for d in SERVICE_DIRS):
                    return "is a directory of the service's own workspaces; name a directory inside it"
                return None
        parts = [p for p in path.split("/") if p]
        if len(parts) < 2:
            return "is the root or a top-level directory; name a directory below one (such as /tmp/<name>)"
        for tree in SYSTEM_TREES:
            if inside(path, tree):
                return f"lies in the system directory {tree}"
        for home in HOME_PARENTS:
            if os.path.dirname(path) == home:
                return "is a home directory; name a directory inside it"
        for guarded in self.protected:
            if inside(guarded, path) or inside(path, guarded):
                return (
                    f"contains or lies inside the service's state directory {guarded!r} (its databases); "
                    "use another directory, or move the state with AGENTRT_STATE_DIR"
                )
        return None

    def refuse_if_bad(self, requested: str, real: str, tenant: str) -> None:
        """Raise when real (the path as opened or resolved) may not be tenant's workspace.

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_VALUE (field workspace) naming the rule.
        """
        why = self.problem(os.path.normpath(real), tenant)
        if why is not None:
            shown = repr(requested) if requested == real else f"{requested!r} (that is {real!r})"
            raise invalid(Reason.INVALID_VALUE, f"workspace {shown} {why}", field="workspace")

    def check(self, path: str, tenant: str) -> str:
        """Validate a requested workspace and return it fully resolved.

        Every symlink is resolved, the last component's included; a missing last component
        resolves through its parent, which must exist. Both the path as written and as
        resolved must pass the rules (`open_workspace` checks the opened directory again).

        Args:
            path: the requested absolute path.
            tenant: the caller's tenant.

        Returns:
            The real path (the last component may not exist yet).

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_VALUE (field workspace) for a relative path,
                a NUL byte, a refused directory (module docstring) or a missing parent.
        """
        if "\x00" in path:
            raise invalid(
                Reason.INVALID_VALUE, "workspace must not contain NUL characters", field="workspace"
            )
        if not path or not os.path.isabs(path):
            raise invalid(
                Reason.INVALID_VALUE,
                f"workspace must be an absolute path, not {quote(path, 256)}",
                field="workspace",
            )
        norm = os.path.normpath(path)
        self.refuse_if_bad(path, norm, tenant)
        parent = os.path.dirname(norm)
        try:
            if os.path.lexists(norm):
                real = os.path.realpath(norm)
            else:
                real = os.path.join(os.path.realpath(parent), os.path.basename(norm))
        except OSError as exc:  # a component vanished or was swapped while it was resolved
            raise invalid(
                Reason.INVALID_VALUE,
                f"workspace {quote(path, 256)} changed while it was checked "
                f"({exc.strerror or exc}); try again",
                field="workspace",
            ) from None
        self.refuse_if_bad(path, real, tenant)
        if not os.path.isdir(os.path.dirname(real)):
            raise invalid(
                Reason.INVALID_VALUE,
                f"workspace parent {quote(parent, 256)} does not exist",
                field="workspace",
            )
        return real
