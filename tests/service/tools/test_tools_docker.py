"""What only the docker backend has: ownership of container names, the engine's absence,
users, networks, images other than the default, container limits, and its bad inputs
(004 §2.7n–§2.7q). Against the real engine; skips locally and FAILS under CI without one
(except the unreachable-engine test, which needs none)."""

from __future__ import annotations

import asyncio
import json
import os

import grpc
import pytest
from backend_helpers import IMAGE, docker_api, open_box

from agentrt.mesh.status import reason_of
from agentrt.tools.config import DockerSettings
from agentrt.tools.docker.engine import RECIPE_LABEL
from agentrt.v1 import common_pb2
from agentrt.v1 import tool_service_pb2 as pb

DOCKER = pb.SANDBOX_BACKEND_DOCKER
pytestmark = pytest.mark.slow  # containers


async def _refused(coro, code: grpc.StatusCode, reason: str) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await coro
    assert info.value.code() == code, info.value.details()
    assert reason_of(info.value) == reason
    return info.value


def _run_foreign(name: str) -> str:
    """Start a container nobody's tool service created, holding name; return its id."""
    api = docker_api()
    host_config = api.create_host_config(network_mode="none")
    cid = api.create_container(
        IMAGE, ["sleep", "600"], name=name, labels={"agentrt.owner": "someone-else"}, host_config=host_config
    )["Id"]
    api.start(cid)
    return cid


def _running_id(name: str) -> tuple[str, bool]:
    info = docker_api().inspect_container(name)
    return info["Id"], bool(info["State"]["Running"])


async def test_a_foreign_container_at_the_name_is_refused_and_left_untouched(start_server, tmp_path):
    async with open_box(start_server, tmp_path, "docker") as box:
        api = docker_api()
        foreign: list[str] = []
        try:
            # a new sandbox whose name a stranger holds
            name = box.container("sbx_taken")
            foreign.append(await asyncio.to_thread(_run_foreign, name))
            err = await _refused(
                box.env.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox_id="sbx_taken", backend=DOCKER)),
                grpc.StatusCode.FAILED_PRECONDITION,
                "SANDBOX_FOREIGN",
            )
            assert "not created by this tool service" in err.details()
            assert await asyncio.to_thread(_running_id, name) == (foreign[0], True)

            # our sandbox's container swapped for a stranger's behind our back
            mine = box.container()
            await asyncio.to_thread(api.remove_container, mine, force=True)
            foreign.append(await asyncio.to_thread(_run_foreign, mine))
            sid = box.sandbox_id
            for call in (
                box.env.stub.StopSandbox(pb.StopSandboxRequest(sandbox_id=sid)),
                box.env.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id=sid)),
                box.env.stub.DestroySandbox(pb.DestroySandboxRequest(sandbox_id=sid)),
                box.env.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox_id=sid, backend=DOCKER)),
            ):
                await _refused(call, grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_FOREIGN")
            # a command goes by the id we created, which is gone: never into the stranger's
            await _refused(box.sh("true"), grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_UNAVAILABLE")
            assert await asyncio.to_thread(_running_id, mine) == (foreign[1], True)
        finally:
            for cid in foreign:
                await asyncio.to_thread(api.remove_container, cid, force=True)


async def test_an_unreachable_engine_is_unavailable_and_local_keeps_serving(start_server, tmp_path):
    settings = DockerSettings(host=f"unix://{tmp_path}/no-docker.sock", owner="agentrt-test-none")
    async with open_box(start_server, tmp_path, "local", docker=settings) as box:
        err = await _refused(
            box.env.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox_id="sbx_d", backend=DOCKER)),
            grpc.StatusCode.FAILED_PRECONDITION,
            "SANDBOX_UNAVAILABLE",
        )
        assert "unreachable" in err.details() and "no-docker.sock" in err.details()
        got = await box.env.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sbx_d"))
        assert got.sandbox.state == pb.SANDBOX_STATE_ABSENT  # nothing recorded
        assert (await box.sh("echo still")).content == "still\n"


async def test_runs_as_the_images_user_unless_one_is_named(start_server, tmp_path):
    async with open_box(start_server, tmp_path, "docker") as box:
        assert (await box.sh("id -u")).content == "0\n"  # the image's user (root here)
        await box.create("sbx_nobody", user="65534:65534")
        assert (await box.sh("id -u; id -g", sandbox_id="sbx_nobody")).content == "65534\n65534\n"


def _foreign_image(tag: str) -> None:
    """An image without the keeper and without our label, whose own user is 65534."""
    api = docker_api()
    cid = api.create_container(IMAGE, ["rm", "-rf", "/.agentrt"])["Id"]
    try:
        api.start(cid)
        api.wait(cid)
        api.commit(cid, repository=tag, changes=["USER 65534:65534", f"LABEL {RECIPE_LABEL}="])
    finally:
        api.remove_container(cid, force=True)


async def test_another_image_gets_the_keeper_and_runs_as_its_own_user(start_server, tmp_path):
    tag = f"agentrt-test-foreign-{os.urandom(4).hex()}"
    await asyncio.to_thread(_foreign_image, tag)
    try:
        async with open_box(start_server, tmp_path, "docker") as box:
            await box.create("sbx_other", image=f"{tag}:latest")
            result = await box.sh("id -u; ls /.agentrt", sandbox_id="sbx_other")
            assert result.content == "65534\nagentrt-exec\n"
            timed = await box.sh("sleep 30", sandbox_id="sbx_other", timeout=1.0)
            assert timed.status == common_pb2.TOOL_RESULT_STATUS_TIMED_OUT  # the keeper killed it
    finally:
        await asyncio.to_thread(docker_api().remove_image, f"{tag}:latest", force=True)


async def test_a_named_network_is_joined(start_server, tmp_path):
    async with open_box(start_server, tmp_path, "docker") as box:
        await box.create("sbx_net", network="bridge")
        table = (await box.sh("cat /proc/net/dev", sandbox_id="sbx_net")).content
        interfaces = {line.split(":")[0].strip() for line in table.splitlines() if ":" in line}
        assert "eth0" in interfaces


async def test_limits_reach_the_container(start_server, tmp_path):
    async with open_box(start_server, tmp_path, "docker") as box:
        limits = pb.SandboxLimits(file_size_bytes=1024 * 1024, open_files=256)
        await box.create("sbx_lim", limits=limits)
        # The figures go to a file, read back with read_file: the engine's exec stream can lose a
        # short command's last output under load (moby/moby#27289), which is not what this checks.
        await box.sh(
            "head -c 5000000 /dev/zero > big; { wc -c < big; ulimit -f; ulimit -n; } > limits.txt",
            sandbox_id="sbx_lim",
        )
        read = await box.env.run("read_file", {"path": "limits.txt"}, sandbox_id="sbx_lim")
        size, blocks, files = read.result.content.split()[-3:]
        assert int(size) <= 1024 * 1024
        assert (blocks, files) == ("1024", "256")


@pytest.mark.parametrize(
    ("fields", "code", "reason"),
    [
        ({"image": "agentrt-no-such-image:0"}, grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_UNAVAILABLE"),
        ({"network": "agentrt-no-such-net"}, grpc.StatusCode.FAILED_PRECONDITION, "SANDBOX_UNAVAILABLE"),
        ({"network": "host"}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"),
        ({"network": "container:x"}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"),
        ({"user": "a b"}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"),
        ({"image": "bad image"}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"),
        ({"env": {"1BAD": "x"}}, grpc.StatusCode.INVALID_ARGUMENT, "INVALID_VALUE"),
    ],
)
async def test_bad_docker_requests_change_nothing(start_server, tmp_path, fields, code, reason):
    async with open_box(start_server, tmp_path, "docker") as box:
        req = pb.CreateSandboxRequest(sandbox_id="sbx_bad", backend=DOCKER, **fields)
        await _refused(box.env.stub.CreateSandbox(req), code, reason)
        got = await box.env.stub.GetSandbox(pb.GetSandboxRequest(sandbox_id="sbx_bad"))
        assert got.sandbox.state == pb.SANDBOX_STATE_ABSENT
        names = [c["Names"][0] for c in await asyncio.to_thread(docker_api().containers, all=True)]
        assert f"/{box.container('sbx_bad')}" not in names
        assert (await box.sh("echo fine")).content == "fine\n"  # the service keeps serving


async def test_switching_a_sandbox_to_local_removes_its_container_and_keeps_files(start_server, tmp_path):
    async with open_box(start_server, tmp_path, "docker") as box:
        await box.sh("echo kept > k.txt")
        local = await box.env.stub.CreateSandbox(
            pb.CreateSandboxRequest(sandbox_id=box.sandbox_id, backend=pb.SANDBOX_BACKEND_LOCAL)
        )
        assert local.sandbox.backend == pb.SANDBOX_BACKEND_LOCAL
        names = [c["Names"][0] for c in await asyncio.to_thread(docker_api().containers, all=True)]
        assert f"/{box.container()}" not in names
        assert (await box.sh("cat k.txt")).content == "kept\n"


async def test_a_session_id_is_refused_in_a_docker_sandbox_never_run_outside_it(start_server, tmp_path):
    async with open_box(start_server, tmp_path, "docker") as box:
        resp = await box.env.run(
            "exec_command", {"cmd": "touch shell-ran", "session_id": "s1"}, sandbox_id=box.sandbox_id
        )
        assert resp.result.is_error
        assert json.loads(resp.result.details_json)["reason"] == "SESSION_UNSUPPORTED"
        assert not os.path.exists(os.path.join(box.workspace, "shell-ran"))


async def test_a_timeout_kills_only_its_own_command(start_server, tmp_path):
    async with open_box(start_server, tmp_path, "docker") as box:
        slow = asyncio.ensure_future(box.sh("sleep 300", timeout=1.0))
        other = await box.sh("sleep 1.5; echo survived", timeout=30)
        assert (await slow).status == common_pb2.TOOL_RESULT_STATUS_TIMED_OUT
        assert other.content == "survived\n" and not other.is_error
