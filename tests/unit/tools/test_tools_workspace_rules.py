"""Which directories may be a workspace (tools/sandbox/workspaces.py), and RLIMIT_NPROC in the launch argv."""

from __future__ import annotations

import os

import pytest

from agentrt.core.errors import MeshError
from agentrt.tools.config import CommandLimits, ToolsConfig
from agentrt.tools.files.paths import Workspace
from agentrt.tools.sandbox import launch
from agentrt.tools.sandbox.workspaces import WorkspaceRules

ROOT = "/srv/agentrt/state/workspaces"
RULES = WorkspaceRules((ROOT,), ("/srv/agentrt/state",))


@pytest.mark.parametrize(
    "path",
    [
        "/", "/tmp", "/home", "/srv", "/work", "/data", "/mnt", "/agentrt-new",  # top-level
        "/run", "/run/p", "/var/run", "/var/lib/docker", "/var/tmp/x", "/root/x", "/usr/local/x",
        "/etc/x", "/opt/x", "/proc/self", "/sys/x", "/dev/shm/x", "/boot/x", "/snap/x", "/lib/x",
        "/home/alice",  # a home directory itself
        "/srv/agentrt", "/srv/agentrt/state", "/srv/agentrt/state/tools.db.d",  # the state dir
        ROOT, ROOT + "/default", ROOT + "/other/x", ROOT + "/eve/runs", ROOT + "/eve/sandboxes",
    ],
)  # fmt: skip
def test_refused_workspaces(path):
    assert RULES.problem(path, "eve") is not None


@pytest.mark.parametrize(
    "path",
    ["/tmp/x", "/home/alice/proj", "/srv/x", "/work/x", "/data/x", "/mnt/disk/x", ROOT + "/eve/x",
     ROOT + "/eve/runs/run_1", ROOT + "/eve/sandboxes/sbx_1/sub"],
)  # fmt: skip
def test_allowed_workspaces(path):
    assert RULES.problem(path, "eve") is None


def test_the_workspace_root_may_lie_in_a_system_tree():
    rules = WorkspaceRules(("/var/lib/agentrt/workspaces",), ("/var/lib/agentrt",))
    assert rules.problem("/var/lib/agentrt/workspaces/eve/x", "eve") is None
    assert rules.problem("/var/lib/agentrt/workspaces/bob/x", "eve") is not None
    assert rules.problem("/var/lib/agentrt/x", "eve") is not None


def test_check_resolves_a_symlink_in_the_last_component(tmp_path):
    target = tmp_path / "real"
    target.mkdir()
    (tmp_path / "good").symlink_to(target)
    (tmp_path / "bad").symlink_to("/run")
    (tmp_path / "bad_parent").symlink_to("/usr")
    assert RULES.check(str(tmp_path / "good"), "eve") == str(target)
    assert RULES.check(str(tmp_path / "new"), "eve") == str(tmp_path / "new")
    for name in ("bad", "bad_parent/x", "real/../bad", "missing/x"):
        with pytest.raises(MeshError) as info:
            RULES.check(str(tmp_path / name), "eve")
        assert info.value.reason == "INVALID_VALUE" and info.value.metadata["field"] == "workspace"
    for real in ("/var/run", "/var/lib/docker", "/run", "/tmp", "/", "/tmp/../etc", "/home"):
        with pytest.raises(MeshError):
            RULES.check(real, "eve")  # checks only: nothing is opened or created
    for bad in ("", "relative", "/tmp/a\x00b"):
        with pytest.raises(MeshError):
            RULES.check(bad, "eve")


def test_nproc_is_set_inside_bwrap_and_outside_when_unconfined(tmp_path):
    bins = launch.Binaries(
        "/usr/bin/bwrap", "/usr/bin/prlimit", "/usr/bin/unshare", "/usr/bin/setpriv", "/bin/bash"
    )
    limits = CommandLimits(processes=77)
    ws = Workspace(str(tmp_path))  # as the service's own user: no uid drop, bound by descriptor
    confined = launch.confined(bins, "true", ws, str(tmp_path), {}, limits)
    try:
        argv = confined.argv
        bwrap = argv.index("/usr/bin/bwrap")
        assert not any(a.startswith("--nproc") for a in argv[:bwrap])  # not before the user namespace
        tail = argv[argv.index("--", bwrap) + 1 :]
        assert tail == ["/usr/bin/prlimit", "--nproc=77", "--", "/bin/bash", "-c", "true"]
    finally:
        for fd in confined.pass_fds:
            os.close(fd)
        assert confined.guard is not None
        confined.guard.release()
    loose = launch.unconfined(bins, "true", ws, str(tmp_path), {}, limits)
    assert "--nproc=77" in loose.argv and loose.argv.index("--nproc=77") < loose.argv.index("/bin/bash")


def test_max_processes_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("AGENTRT_TOOLS_MAX_PROCESSES", "123")
    monkeypatch.setenv("AGENTRT_TOOLS_MAX_SHELLS_PER_TENANT", "3")
    config = ToolsConfig.from_env()
    assert config.limits.processes == 123 and config.max_shells_per_tenant == 3
    assert ToolsConfig().limits.processes == 512 and ToolsConfig().max_shells_per_tenant == 8
    with pytest.raises(ValueError):
        ToolsConfig(limits=CommandLimits(processes=0))


def test_open_workspace_chowns_only_what_it_made(tmp_path):
    from agentrt.core.errors import invalid
    from agentrt.tools.files.paths import open_workspace

    def refuse(real: str) -> None:
        raise invalid("INVALID_VALUE", f"no {real}")

    with pytest.raises(MeshError):  # refused after it was made: taken back
        open_workspace(
            str(tmp_path / "gone"), make_parents=False, sandbox_uid=65534, sandbox_gid=65534, check=refuse
        )
    assert not (tmp_path / "gone").exists()
    with pytest.raises(MeshError) as info:  # not created when asked not to
        open_workspace(
            str(tmp_path / "absent"), make_parents=False, sandbox_uid=65534, sandbox_gid=65534, create=False
        )
    assert info.value.reason == "WORKSPACE_NOT_FOUND" and not (tmp_path / "absent").exists()
    (tmp_path / "link").symlink_to(tmp_path)
    with pytest.raises(MeshError):  # a symlink as the last component is never followed
        open_workspace(str(tmp_path / "link"), make_parents=False, sandbox_uid=65534, sandbox_gid=65534)
    if os.geteuid() != 0:
        return
    existing = tmp_path / "existing"
    existing.mkdir()
    ws = open_workspace(str(existing), make_parents=False, sandbox_uid=65534, sandbox_gid=65534)
    assert (existing.stat().st_uid, ws.uid, ws.writable) == (0, 65534, False)
    made = open_workspace(str(tmp_path / "made"), make_parents=False, sandbox_uid=65534, sandbox_gid=65534)
    assert ((tmp_path / "made").stat().st_uid, made.uid, made.writable) == (65534, 65534, True)
    below = open_workspace(
        str(tmp_path / "root" / "t" / "runs" / "r"), make_parents=True, sandbox_uid=65534, sandbox_gid=65534,
        base=str(tmp_path / "root"),
    )  # fmt: skip
    assert below.uid == 65534 and (tmp_path / "root" / "t").stat().st_uid == 0  # only the leaf
    (tmp_path / "root" / "t" / "runs" / "planted").symlink_to(existing)
    with pytest.raises(MeshError):
        open_workspace(
            str(tmp_path / "root" / "t" / "runs" / "planted"), make_parents=True, sandbox_uid=65534,
            sandbox_gid=65534, base=str(tmp_path / "root"),
        )  # fmt: skip
    assert existing.stat().st_uid == 0


def test_a_nul_in_a_workspace_is_named_as_such():
    with pytest.raises(MeshError) as info:
        RULES.check("/tmp/a\x00b", "eve")
    assert info.value.metadata["field"] == "workspace" and "NUL" in info.value.message


def test_a_path_that_changes_while_it_is_resolved_is_invalid_not_internal(monkeypatch, tmp_path):
    """A component swapped mid-check (a race) is the caller's INVALID_VALUE, never INTERNAL."""
    target = tmp_path / "ws"
    target.mkdir()

    def vanished(path, *args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", path)

    monkeypatch.setattr(os.path, "realpath", vanished)
    with pytest.raises(MeshError) as info:
        RULES.check(str(target), "eve")
    assert info.value.reason == "INVALID_VALUE" and "changed while it was checked" in info.value.message
