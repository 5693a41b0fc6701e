"""Which workspaces the service accepts, whose they are, and who owns them afterwards.

Checked from the host: system directories (directly, through `..` or through a symlink in
any component) are refused by every RPC that takes a workspace, an explicit workspace in
the service's workspace root must lie in the caller's own tenant directory, the owner of a
directory the service did not create never changes, and a download creates nothing.
No test names a real system directory (a regression would chown it): they make their own
under /run, /var/lib and /var/tmp and remove it again (giving it back to root first, should
its owner ever have changed). tests/unit/tools checks the rules on the real paths.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import tarfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from tools_helpers import SANDBOX_UID, ToolsEnv

from agentrt.mesh.status import details_of, reason_of
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb
from tests.needs import unavailable

LOCAL, DOCKER = pb.SANDBOX_BACKEND_LOCAL, pb.SANDBOX_BACKEND_DOCKER


def tenant(name: str) -> tuple[tuple[str, str], ...]:
    return (("x-agentrt-tenant", name),)


def a_tar() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("planted.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"x\n"))
    return buf.getvalue()


async def upload(tools: ToolsEnv, metadata=(), **target) -> pb.UploadWorkspaceResponse:
    async def messages():
        yield pb.UploadWorkspaceRequest(target=pb.WorkspaceTarget(**target), data=a_tar())

    return await tools.stub.UploadWorkspace(messages(), metadata=metadata)


async def download(tools: ToolsEnv, metadata=(), **target) -> bytes:
    request = pb.DownloadWorkspaceRequest(target=pb.WorkspaceTarget(**target))
    return b"".join([m.data async for m in tools.stub.DownloadWorkspace(request, metadata=metadata)])


async def refused(coro, reason: str = "INVALID_VALUE", field: str = "workspace") -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        await coro
    assert reason_of(info.value) == reason, info.value.details()
    if field:
        assert details_of(info.value)[1].get("field") == field, info.value.details()
    return info.value


async def every_rpc_refuses(tools: ToolsEnv, workspace: str, metadata=(), call: str = "c") -> None:
    """ExecuteTool (a file tool and a command), CreateSandbox (both backends), Upload, Download."""
    for i, (tool, args) in enumerate([("list_files", {}), ("exec_command", {"cmd": "echo hi > f"})]):
        req = tools.request(tool, args, workspace=workspace, call_id=f"{call}_{i}")
        await refused(tools.stub.ExecuteTool(req, metadata=metadata))
    for i, backend in enumerate((LOCAL, DOCKER)):  # refused before any engine is asked
        create = pb.CreateSandboxRequest(sandbox_id=f"sbx_{call}_{i}", backend=backend, workspace=workspace)
        await refused(tools.stub.CreateSandbox(create, metadata=metadata))
    await refused(upload(tools, metadata, workspace=workspace))
    await refused(download(tools, metadata, workspace=workspace))


def owner(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_uid, st.st_gid


@contextlib.contextmanager
def system_dir(parent: str = "/run") -> Iterator[str]:
    """A fresh root-owned directory in a system tree, removed afterwards (its owner restored first).

    The tests never name a real system directory itself (/run, /var/lib/docker): should the
    rules ever regress, the service would chown it; this one is the test's own.
    """
    path = f"{parent}/agentrt-test-{os.urandom(6).hex()}"
    os.mkdir(path, 0o755)
    try:
        yield path
    finally:
        if owner(path) != (0, 0):
            os.chown(path, 0, 0)
        shutil.rmtree(path)


def remove_if_made(path: str) -> bool:
    """Remove path if a (regressed) service created it; True when it existed."""
    if not os.path.lexists(path):
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


def needs_root() -> None:
    if os.geteuid() != 0:
        unavailable("ownership rules apply when the tool service runs as root")


# -- system directories --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parent", "spelled"),
    [("/run", "/run"), ("/run", "/var/run"), ("/var/lib", "/var/lib"), ("/var/tmp", "/var/tmp")],
)
async def test_system_trees_are_refused_by_every_rpc(tools, parent, spelled):
    """/run (also spelled /var/run), a /var/lib/docker-like directory, /var/tmp: refused, never chowned."""
    needs_root()
    with system_dir(parent) as target:
        name = os.path.basename(target)
        await every_rpc_refuses(tools, f"{spelled}/{name}", call="d")
        link = tools.tmp / "link"
        link.symlink_to(target)  # the last component is a symlink
        await every_rpc_refuses(tools, str(link), call="l")
        via = tools.tmp / "via"
        via.symlink_to(parent)  # a symlink in the middle
        await every_rpc_refuses(tools, str(via / name), call="v")
        new = f"{parent}/agentrt-new-{os.urandom(4).hex()}"
        try:
            await every_rpc_refuses(tools, str(via / os.path.basename(new)), call="n")
        finally:
            assert not remove_if_made(new)
        assert owner(target) == (0, 0) and os.listdir(target) == []


@pytest.mark.parametrize(
    "workspace",
    [f"/agentrt-top-level-{os.urandom(4).hex()}", f"/home/agentrt-user-{os.urandom(4).hex()}"],
    # fixed ids: the paths are random, and pytest-xdist requires every worker to collect the same ids
    ids=["top-level", "home"],
)
async def test_top_level_and_home_directories_are_refused(tools, workspace):
    try:
        await every_rpc_refuses(tools, workspace)
    finally:
        assert not remove_if_made(workspace)  # nothing was created


async def test_a_symlink_planted_in_the_services_own_tree_is_refused(tools):
    needs_root()
    with system_dir() as target:
        runs = Path(tools.config.resolved_workspace_root) / "default" / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        (runs / "run_sym").symlink_to(target)
        req = tools.request("list_files", {}, run_id="run_sym", workspace="")
        await refused(tools.stub.ExecuteTool(req))
        await refused(download(tools, run_id="run_sym"))
        assert owner(target) == (0, 0)


# -- owners never change ---------------------------------------------------------------------


async def test_an_existing_root_owned_directory_is_never_chowned(tools):
    needs_root()
    ws = tools.tmp / "rootowned"
    ws.mkdir(mode=0o755)
    listed = await tools.run("list_files", {}, workspace=str(ws))
    assert not listed.result.is_error  # the file tools run in the service
    err = await refused(
        tools.stub.ExecuteTool(
            tools.request("exec_command", {"cmd": "touch x"}, workspace=str(ws), call_id="c1")
        ),
        "WORKSPACE_NOT_WRITABLE",
    )
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "chown it" in err.details()
    record = await tools.stub.GetExecution(pb.GetExecutionRequest(run_id="run_1", call_id="c1"))
    assert record.state == pb.EXECUTION_STATE_ABSENT  # refused before anything was journaled
    # a local sandbox over it: created, but its commands are refused the same way
    await tools.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox_id="sbx_ro", workspace=str(ws)))
    in_sandbox = tools.request("exec_command", {"cmd": "id"}, sandbox_id="sbx_ro", call_id="c2")
    await refused(tools.stub.ExecuteTool(in_sandbox), "WORKSPACE_NOT_WRITABLE")
    await tools.stub.DestroySandbox(pb.DestroySandboxRequest(sandbox_id="sbx_ro"))
    assert ws.is_dir() and owner(str(ws)) == (0, 0)


async def test_existing_directories_keep_their_owner_and_commands_run_as_it(tools):
    needs_root()
    shared = tools.tmp / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # root-owned but writable by anyone: usable as is
    theirs = tools.tmp / "theirs"
    theirs.mkdir()
    os.chown(theirs, 4321, 4321)
    for ws, uid in ((shared, SANDBOX_UID), (theirs, 4321)):
        before = owner(str(ws))
        result = await tools.sh("id -u && touch made", workspace=str(ws))
        assert not result.is_error and result.content == f"{uid}\n", result.content
        assert owner(str(ws)) == before and owner(str(ws / "made")) == (uid, uid)
    fresh = tools.tmp / "fresh"  # the one directory the service creates: handed to the sandbox uid
    assert not (await tools.sh("touch made", workspace=str(fresh))).is_error
    assert owner(str(fresh)) == (SANDBOX_UID, SANDBOX_UID)


# -- tenants -------------------------------------------------------------------------------------


async def test_explicit_workspaces_in_the_root_are_tenant_scoped(tools):
    root = os.path.realpath(tools.config.resolved_workspace_root)
    secret = await tools.sh("echo secret > secret.txt", workspace="")  # tenant default, run_1
    assert not secret.is_error
    victim = os.path.join(root, "default", "runs", "run_1")
    assert os.path.exists(os.path.join(victim, "secret.txt"))
    eve = tenant("eve")
    for i, workspace in enumerate(
        [root, victim, os.path.join(root, "default"), os.path.join(root, "eve"),
         os.path.join(root, "eve", "runs"), os.path.join(root, "eve", "sandboxes"),
         os.path.join(root, "eve", "..", "default", "runs", "run_1")]
    ):  # fmt: skip
        await every_rpc_refuses(tools, workspace, eve, call=f"e{i}")
    assert sorted(os.listdir(victim)) == ["secret.txt"]  # no upload landed
    # eve's own directory is hers; a symlink she plants there still cannot reach the victim
    mine = os.path.join(root, "eve", "mine")
    made = await tools.stub.ExecuteTool(
        tools.request("exec_command", {"cmd": f"ln -s {victim} peek && echo ok"}, workspace=mine),
        metadata=eve,
    )
    assert made.result.content == "ok\n", made.result.content
    await every_rpc_refuses(tools, os.path.join(mine, "peek"), eve, call="peek")
    # the owner of the tree still may name it
    read = await tools.run("read_file", {"path": "secret.txt"}, workspace=victim, call_id="own")
    assert read.result.content == "secret\n"


# -- downloads create nothing ----------------------------------------------------------------


async def test_download_of_a_missing_workspace_is_not_found_and_creates_nothing(tools):
    root = os.path.realpath(tools.config.resolved_workspace_root)
    await refused(download(tools, run_id="run_never"), "WORKSPACE_NOT_FOUND")
    assert not os.path.exists(os.path.join(root, "default"))
    missing = tools.tmp / "missing"
    await refused(download(tools, workspace=str(missing)), "WORKSPACE_NOT_FOUND")
    assert not missing.exists()
    sandbox = (await tools.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox_id="sbx_gone"))).sandbox
    shutil.rmtree(sandbox.workspace)
    await refused(download(tools, sandbox_id="sbx_gone"), "WORKSPACE_NOT_FOUND")
    assert not os.path.exists(sandbox.workspace)
    await upload(tools, run_id="run_up")  # an upload still creates its target
    assert os.path.exists(os.path.join(root, "default", "runs", "run_up", "planted.txt"))
    await refused(download(tools, run_id="run_up", path="nope"), "WORKSPACE_NOT_FOUND", "target.path")
    assert not os.path.exists(os.path.join(root, "default", "runs", "run_up", "nope"))


async def test_refusals_name_the_workspace_rule(tools):
    """The refusal says which rule applies (a model or an operator reads it)."""
    needs_root()
    with system_dir("/var/lib") as target:
        err = await refused(tools.stub.ExecuteTool(tools.request("list_files", {}, workspace=target)))
        assert "system directory /var" in err.details()
    top = f"/agentrt-top-level-{os.urandom(4).hex()}"
    try:
        err = await refused(tools.stub.ExecuteTool(tools.request("list_files", {}, workspace=top)))
        assert "top-level" in err.details()
    finally:
        assert not remove_if_made(top)
    ok = await tools.run("list_files", {}, workspace=str(tools.tmp / "fine"))
    assert ok.result.status == common_pb2.TOOL_RESULT_STATUS_OK, json.loads(ok.result.details_json or "{}")
