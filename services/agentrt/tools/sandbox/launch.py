"""How a sandboxed command is launched: the argv of guard + (staging) + prlimit + bwrap, and its fds.

Invariants (what `confined` builds; docs/services/tools.md explains each):
- Everything runs under a guard (`guard.py`, decision 0031): pid 1 of a pid namespace of
  its own that kills the whole tree when the service closes its end of a pipe, or dies.
- bwrap runs unprivileged. As root, the guard's private mount namespace stages the
  workspace on a tmpfs the sandbox uid can reach, then every privilege is dropped with
  `setpriv` (uid, gid, supplementary groups, no_new_privs) BEFORE bwrap is exec'd; as
  another user, bwrap binds the workspace by descriptor.
- bwrap unshares every namespace (no network at all), forbids nested user namespaces,
  starts a new session, clears the environment, binds /usr and the library links
  read-only, builds /etc from a short list plus a synthesized passwd/group (no shadow),
  mounts a private /proc, a minimal /dev and a size-bounded tmpfs /tmp, and binds the
  workspace at its host path as the only writable place.
- `prlimit` sets RLIMIT_CPU, RLIMIT_AS, RLIMIT_FSIZE, RLIMIT_NOFILE and no core files
  outside; RLIMIT_NPROC is set by a second `prlimit` INSIDE the sandbox (after bwrap made
  its user namespace), so it counts that namespace's processes only: since Linux 5.14 the
  count is kept per user namespace, and a limit set before bwrap would also cap the
  namespace as a whole against every process of the uid on the host (the service's own
  user's, when it is not root).
- The kill is the guard's: closing `Launch.guard` ends the command and everything it started.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass

from agentrt.core.errors import Reason, precondition
from agentrt.tools.config import CommandLimits
from agentrt.tools.files.paths import Workspace
from agentrt.tools.sandbox.guard import SandboxGuard, SandboxOwner

BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
}
#: /etc entries a shell and common tools need; nothing secret (no shadow, no ssl/private).
ETC_ENTRIES = (
    "alternatives ld.so.cache ld.so.conf ld.so.conf.d localtime timezone nsswitch.conf hosts host.conf "
    "protocols services bash.bashrc profile inputrc mime.types ssl/certs ca-certificates terminfo magic "
    "magic.mime locale.alias os-release debian_version python3 python3.11 perl"
).split()
log = logging.getLogger("agentrt.tools")

#: How long a launcher cancelled while starting may take to exit after SIGKILL, in seconds.
_ABANDON_WAIT_SECONDS = 5.0
_LIB_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: As root, the guard (in its private mount namespace) mounts a tmpfs on one of these and binds
#: the workspace at <it>/ws: the unprivileged bwrap reaches it even when an ancestor of the
#: workspace is not searchable by the sandbox uid (a 0700 /root, say).
_STAGING_CANDIDATES = ("/run", "/mnt", "/media", "/srv")
_BWRAP_FLAGS = (
    "--unshare-all --unshare-user --disable-userns --die-with-parent --new-session --clearenv".split()
)


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the helpers ("" when missing)."""

    bwrap: str
    prlimit: str
    unshare: str
    setpriv: str
    bash: str


@dataclass
class Launch:
    """An argv ready to exec and the descriptors it must inherit (closed by `spawn`).

    Attributes:
        argv: the command line.
        pass_fds: descriptors the child keeps.
        guard: the service's end of the command's guard (the caller owns it: releasing it
            kills the command and everything it started); None when unconfined.
        cwd: working directory of the launcher.
        env: environment of the launcher.
    """

    argv: list[str]
    pass_fds: list[int]
    guard: SandboxGuard | None
    cwd: str
    env: dict[str, str]


def prlimit_args(prlimit: str, limits: CommandLimits, *, processes: bool = False) -> list[str]:
    """Return `prlimit --cpu=... --` setting the rlimits soft and hard.

    Args:
        prlimit: the prlimit executable.
        limits: the values.
        processes: also set RLIMIT_NPROC (`limits.processes`).
    """
    nproc = [f"--nproc={limits.processes}"] if processes else []
    return [
        prlimit, f"--cpu={limits.cpu_seconds}", f"--as={limits.memory_bytes}",
        f"--fsize={limits.file_size_bytes}", f"--nofile={limits.open_files}", "--core=0", *nproc, "--",
    ]  # fmt: skip


def nproc_args(prlimit: str, limits: CommandLimits) -> list[str]:
    """Return `prlimit --nproc=N --`: RLIMIT_NPROC alone, run inside the sandbox (module docstring)."""
    return [prlimit, f"--nproc={limits.processes}", "--"]


def unconfined(
    bins: Binaries, command: str, ws: Workspace, workdir: str, env: Mapping[str, str], limits: CommandLimits
) -> Launch:
    """Return the launch of an unconfined command: bash in the workdir under rlimits.

    As root it still drops to the workspace's uid with `setpriv` (an exec'd helper rather
    than subprocess's `user=`, which would fork a threaded process instead of vfork'ing).
    """
    drop = []
    if ws.uid is not None:
        drop = [
            bins.setpriv,
            f"--reuid={ws.uid}",
            f"--regid={ws.gid}",
            "--clear-groups",
            "--no-new-privs",
            "--",
        ]
    argv = [*drop, *prlimit_args(bins.prlimit, limits, processes=True), bins.bash, "-c", command]
    return Launch(argv, [], None, workdir, {**BASE_ENV, **env})


def confined(
    bins: Binaries,
    command: str,
    ws: Workspace,
    workdir: str,
    env: Mapping[str, str],
    limits: CommandLimits,
    owner: SandboxOwner | None = None,
) -> Launch:
    """Return the launch of a command under bubblewrap and its guard (see the module docstring).

    Args:
        bins: the helper executables.
        command: the shell text run as `bash -c command` in the sandbox.
        ws: the workspace (its uid: who the command runs as; None = the service's own user).
        workdir: host path of the working directory, inside the workspace.
        env: variables on top of BASE_ENV.
        limits: rlimits.
        owner: the marks on the guard for the start-up reaper; None: this process, no state dir.

    Raises:
        MeshError: FAILED_PRECONDITION/SANDBOX_UNAVAILABLE when no staging directory exists.
    """
    fds: list[int] = []
    guard: SandboxGuard | None = None
    try:
        passwd_fd, group_fd = _identity_files(ws)
        fds += [passwd_fd, group_fd]
        guard = SandboxGuard.open()
        fds.append(guard.read_fd)
        who = owner if owner is not None else SandboxOwner()
        if ws.uid is None:
            ws_fd = os.open(ws.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            fds.append(ws_fd)
            source = ["--bind-fd", str(ws_fd)]
            launcher = guard.argv(bins.unshare, bins.bash, who)
        else:
            staging = _staging_dir(ws.path)
            source = ["--bind", staging + "/ws"]
            launcher = [
                *guard.argv(bins.unshare, bins.bash, who, staging=staging, workspace=ws.path),
                bins.setpriv, f"--reuid={ws.uid}", f"--regid={ws.gid}", "--clear-groups", "--no-new-privs",
                "--",
            ]  # fmt: skip
    except BaseException:
        for fd in fds:
            os.close(fd)
        if guard is not None:
            guard.release()
        raise
    argv = [bins.bwrap, *_BWRAP_FLAGS, "--hostname", "sandbox"]
    for key, value in {**BASE_ENV, **env}.items():
        argv += ["--setenv", key, value]
    argv += ["--ro-bind", "/usr", "/usr"]
    for path in _LIB_LINKS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--perms", "0755", "--dir", "/etc"]
    for name in ETC_ENTRIES:
        if os.path.exists("/etc/" + name):
            argv += ["--ro-bind", "/etc/" + name, "/etc/" + name]
    argv += [
        "--perms", "0644", "--ro-bind-data", str(passwd_fd), "/etc/passwd",
        "--perms", "0644", "--ro-bind-data", str(group_fd), "/etc/group",
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(limits.tmp_bytes), "--perms", "1777", "--tmpfs", "/tmp",
        "--perms", "0755", "--dir", "/var", "--symlink", "../tmp", "/var/tmp",
        *source, ws.path, "--chdir", workdir,
        "--", *nproc_args(bins.prlimit, limits), "/bin/bash", "-c", command,
    ]  # fmt: skip
    full = [*launcher, *prlimit_args(bins.prlimit, limits), *argv]
    return Launch(full, fds, guard, "/", {"PATH": BASE_ENV["PATH"]})


def _staging_dir(workspace: str) -> str:
    """Return a root-level directory to stage the workspace on (never one of its ancestors)."""
    for path in _STAGING_CANDIDATES:
        if os.path.isdir(path) and not os.path.islink(path) and not workspace.startswith(path + "/"):
            return path
    raise precondition(Reason.SANDBOX_UNAVAILABLE, "no directory to stage the workspace on (/run, /mnt, ...)")


def _identity_files(ws: Workspace) -> tuple[int, int]:
    """Return memfds holding a passwd and a group naming only root and the sandbox user."""
    uid = os.geteuid() if ws.uid is None else ws.uid
    gid = os.getegid() if ws.gid is None else ws.gid
    name = "nobody" if uid == 65534 else "sandbox"
    group = "nogroup" if gid == 65534 else "sandbox"
    passwd = f"root:x:0:0:root:/root:/usr/sbin/nologin\n{name}:x:{uid}:{gid}:{name}:/tmp:/bin/bash\n"
    groups = f"root:x:0:\n{group}:x:{gid}:\n"
    out = []
    for text in (passwd, groups):
        fd = os.memfd_create("agentrt-etc")
        os.write(fd, text.encode())
        os.lseek(fd, 0, os.SEEK_SET)
        out.append(fd)
    return out[0], out[1]


async def spawn(launch: Launch, stdin: int, stdout: int, stderr: int) -> asyncio.subprocess.Process:
    """Start launch's argv in a session of its own with the given stdio (fds or subprocess constants).

    The fds in `launch.pass_fds` are closed here once the child holds them; `launch.guard`
    stays open for the caller, and is released here when the start fails or is cancelled.

    The start runs shielded (decision 0053). Cancelled inside it, asyncio's own cancel path
    kills the launcher and then waits for the output pipes to close, but a guard that outlived
    its launcher and the command under it hold them: while the guard is open that wait lasts
    as long as the command. So a cancel here releases the guard first, then lets the start
    finish, kills what is left of the launcher's process group and reaps it, then re-raises.
    (The start's first step, the fork, always comes before this function sees a cancel: it
    was scheduled first.)

    Raises:
        OSError: the launcher could not be executed.
        asyncio.CancelledError: the caller was cancelled; nothing the launch started is left.
    """
    start = asyncio.ensure_future(_start(launch, stdin, stdout, stderr))
    try:
        return await asyncio.shield(start)
    except BaseException:
        if launch.guard is not None:
            launch.guard.release()
        await _abandon(start)
        raise


async def _start(launch: Launch, stdin: int, stdout: int, stderr: int) -> asyncio.subprocess.Process:
    """`create_subprocess_exec` of the launch; closes its pass_fds once the child holds them."""
    try:
        return await asyncio.create_subprocess_exec(
            *launch.argv,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=launch.cwd,
            env=launch.env,
            pass_fds=tuple(launch.pass_fds),
            start_new_session=True,
        )
    finally:
        for fd in launch.pass_fds:
            os.close(fd)


async def _abandon(start: asyncio.Future[asyncio.subprocess.Process]) -> None:
    """Let a cancelled start finish, then kill the launcher's process group and reap it.

    A start that failed has nothing to reap (its error is retrieved here; the caller's is
    raised). The guard is released already, so the start's pipes close once its sandbox is
    gone; a launcher that does not exit within _ABANDON_WAIT_SECONDS of SIGKILL is left to
    the child watcher (logged).
    """
    try:
        proc = await start
    except BaseException:  # noqa: BLE001 - the start failed or was cancelled: nothing to reap
        return
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)  # its own session and group (start_new_session)
    try:
        await asyncio.wait_for(proc.wait(), _ABANDON_WAIT_SECONDS)
    except TimeoutError:
        log.warning("a launcher cancelled while starting did not end within %.0f s", _ABANDON_WAIT_SECONDS)
