"""The guard around every bwrap sandbox: its whole tree dies with the service (decision 0031).

bwrap's `--die-with-parent` does not make a sandbox die with the process that started it:
the namespace's pid 1 sets its parent-death signal only once its setup is done, and waits
during that setup for the outer bwrap to release it (an eventfd the outer one writes after
its --info-fd JSON). A service killed in that window (milliseconds per command, but
every command has one) leaves the outer bwrap dead and pid 1 orphaned: blocked forever
on that eventfd holding the workspace's bind mount, or, released, running the command
to its end with nobody listening.

So the service no longer relies on parent-death signals. Every confined command runs as

    unshare --pid --fork --kill-child [--mount --propagation private | --user --map-current-user]
        --mount-proc -- bash -c GUARD agentrt-sandbox <state dir> <owner> <fd> <staging> <workspace> CMD...

The guard (bash) is pid 1 of a pid namespace of its own; when it exits the kernel kills
every process in that namespace, bwrap's nested one included, and the guard becomes a
zombie (so unshare, which waits for it, exits) only once they are all gone. The guard
starts CMD (the staging mounts first, as root), then a watcher blocked reading fd, the
read end of a pipe whose only write end the service holds (`SandboxGuard.fd`, close-on-exec).
When the write end closes (the service closes it to kill the command, or the kernel
closes it because the service died, however it died) the read sees EOF, the watcher
signals the guard and the guard exits. EOF is a state, not an event: a service that
died before the guard even started is noticed just the same, so there is no window.
CMD keeps its stdin (a PTY for named shells) and default SIGINT/SIGQUIT handling, which
bash would otherwise ignore in a background job. The sandboxed processes live in bwrap's
own namespaces and can neither see nor signal the guard or its watcher.

The guard's namespace has its own /proc (`--mount-proc`): bwrap reads its child's namespace
ids through /proc by the pid it got from clone(), a pid of the guard's namespace. Through the
service's /proc that pid names another process, or none inside a container, where bwrap then
dies with `open /proc/N/ns failed` (the compose test's tools container).

The argv names the owner: the service's state directory and process identity
(`tools.identity`). `reap_orphans` runs at start and kills the guards a dead owner of the
same state directory left behind (a guard that could not act, say because it was stopped):
never a live owner's (another replica on the same state directory), never another state
directory's, never another user's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass, field

from agentrt.tools.identity import owner_dead, process_identity

log = logging.getLogger("agentrt.tools")

#: argv[0] of every guard's script (`bash -c SCRIPT agentrt-sandbox ...`): how the reaper finds them.
GUARD_NAME = "agentrt-sandbox"
_KILL_WAIT_SECONDS = 5.0
#: $1 state dir and $2 owner are marks for the reaper; $3 the supervising fd; $4 a staging
#: directory ("" for none) and $5 the workspace; then the command. Exit 125: staging failed.
_GUARD_SCRIPT = """\
sup=$3
if [ -n "$4" ]; then
  mount -t tmpfs -o size=64k,mode=0755 agentrt "$4" && mkdir "$4/ws" && mount --bind "$5" "$4/ws" || exit 125
fi
shift 5
trap 'exit 137' USR1
trap 'exit 143' TERM
exec {keep}<&0
env --default-signal=INT,QUIT "$@" 0<&"$keep" {keep}<&- {sup}<&- &
cmd=$!
( read -r -u "$sup" _; kill -USR1 $$ ) 0</dev/null 1>/dev/null 2>&1 {keep}<&- &
exec 0</dev/null 1>/dev/null 2>&1 {keep}<&- {sup}<&-
wait "$cmd"
"""


@dataclass(frozen=True)
class SandboxOwner:
    """Who starts sandboxes: marks every guard so a restart can tell its orphans.

    Attributes:
        state_dir: the service's state directory, a real absolute path ("" for none).
        identity: the owning process (`tools.identity.process_identity`).
    """

    state_dir: str = ""
    identity: str = field(default_factory=process_identity)

    @classmethod
    def of(cls, state_dir: str) -> SandboxOwner:
        """Return this process as the owner of sandboxes under state_dir (resolved)."""
        return cls(os.path.realpath(state_dir) if state_dir else "")


@dataclass
class SandboxGuard:
    """The service's end of one guard: closing `fd` kills the sandbox.

    Attributes:
        fd: write end of the supervising pipe (close-on-exec, never passed to a child); -1
            once closed.
        read_fd: read end, passed to the guard; the spawner closes it once the child holds it.
    """

    fd: int
    read_fd: int

    @classmethod
    def open(cls) -> SandboxGuard:
        """Create the supervising pipe (both ends close-on-exec until spawned with pass_fds)."""
        r, w = os.pipe()
        return cls(w, r)

    def release(self) -> None:
        """Close the write end: the guard kills everything in its namespace and exits. Idempotent."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def argv(
        self, unshare: str, bash: str, owner: SandboxOwner, *, staging: str = "", workspace: str = ""
    ) -> list[str]:
        """Return the argv prefix starting the guard; the sandbox's own argv follows it.

        Args:
            unshare: the unshare executable.
            bash: the bash executable.
            owner: the marks for the reaper.
            staging: as root, the directory to mount the staging tmpfs on ("" when not root:
                the guard then runs in a user namespace of its own, mapping the caller's uid).
            workspace: the workspace bound at `<staging>/ws` (as root).
        """
        if staging:
            scope = ["--mount", "--propagation", "private"]
        else:
            scope = ["--user", "--map-current-user"]
        # --mount-proc: /proc of the guard's own pid namespace, the view bwrap's pids live in
        # (module docstring); it implies a mount namespace, private.
        scope.append("--mount-proc")
        return [
            unshare, "--pid", "--fork", "--kill-child", *scope, "--",
            bash, "-c", _GUARD_SCRIPT, GUARD_NAME, owner.state_dir, owner.identity, str(self.read_fd),
            staging, workspace,
        ]  # fmt: skip


@dataclass(frozen=True)
class _Found:
    pid: int
    state_dir: str
    owner: str


def _guards() -> Iterator[_Found]:
    """Every guard process on the host that this process may see: pid 1 of its namespace, our uid."""
    uid = os.getuid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if len(argv) < 7 or argv[1] != b"-c" or argv[3] != GUARD_NAME.encode():
                continue
            with open(f"/proc/{entry}/status") as f:
                status = dict(line.split(":", 1) for line in f.read().splitlines() if ":" in line)
        except (OSError, ValueError):
            continue
        nspid = status.get("NSpid", "").split()
        if int(status.get("Uid", "-1").split()[0]) != uid or len(nspid) < 2 or nspid[-1] != "1":
            continue
        yield _Found(int(entry), argv[4].decode(errors="replace"), argv[5].decode(errors="replace"))


async def reap_orphans(owner: SandboxOwner) -> int:
    """Kill the sandboxes dead owners of owner's state directory left running; return how many.

    A guard is reaped when its marks name `owner.state_dir` and an owner that is not this
    process and is dead on this host (`owner_dead`), and it runs as this process's uid. The
    guard gets SIGKILL (it is pid 1 of its namespace, so the kernel kills the rest), and this
    returns once each is gone (at most 5 s each, then logged). Never raises: a guard that
    exits by itself meanwhile is simply gone.
    """
    if not owner.state_dir:
        return 0
    pidfds = []
    for found in _guards():
        if found.state_dir != owner.state_dir or found.owner == owner.identity or not owner_dead(found.owner):
            continue
        try:
            pidfd = os.pidfd_open(found.pid)
        except OSError:
            continue  # gone already
        # The pidfd pins that process: check it is still the guard we read (not a reused pid).
        if any(g.pid == found.pid and g.owner == found.owner for g in _guards()):
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            pidfds.append(pidfd)
            log.warning("reaping an orphaned sandbox (pid %d) left by %s", found.pid, found.owner)
        else:
            os.close(pidfd)
    for pidfd in pidfds:
        try:
            await wait_exited(pidfd, _KILL_WAIT_SECONDS)
        finally:
            os.close(pidfd)
    return len(pidfds)


async def wait_exited(pidfd: int, timeout: float) -> None:
    """Wait (at most timeout seconds) until the process behind pidfd has exited."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def ready() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(pidfd, ready)
    try:
        await asyncio.wait_for(done, timeout)
    except TimeoutError:
        log.warning("a sandboxed process did not exit within %.0f s of SIGKILL", timeout)
    finally:
        loop.remove_reader(pidfd)
