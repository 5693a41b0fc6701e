"""UploadWorkspace / DownloadWorkspace: real tar archives, hostile ones included."""

from __future__ import annotations

import asyncio
import io
import os
import tarfile

import grpc
import pytest
from tools_helpers import make_config, make_workspace

from agentrt.mesh.config import ServerConfig
from agentrt.mesh.status import reason_of
from agentrt.tools.server import build_server
from agentrt.v1 import tool_service_pb2 as pb
from agentrt.v1 import tool_service_pb2_grpc as pb_grpc

MiB = 1024 * 1024


def make_tar(entries: list[tuple], *, gz: bool = False) -> bytes:
    """Build a tar; entries are (name, "file", bytes[, mode]), (name, "dir"),
    (name, "sym" | "link", target) or (name, "fifo" | "chr")."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gz else "w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, *rest in entries:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if kind == "file":
                data = rest[0]
                info.size, info.mode = len(data), rest[1] if len(rest) > 1 else 0o644
                tar.addfile(info, io.BytesIO(data))
                continue
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, rest[0]
            elif kind == "link":
                info.type, info.linkname = tarfile.LNKTYPE, rest[0]
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif kind == "chr":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            tar.addfile(info)
    return buf.getvalue()


def read_tar(data: bytes) -> dict[str, tuple[str, bytes | str]]:
    """Name -> ("file", content) | ("dir", "") | ("sym", target)."""
    out: dict[str, tuple[str, bytes | str]] = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for m in tar:
            if m.isreg():
                f = tar.extractfile(m)
                assert f is not None
                out[m.name] = ("file", f.read())
            elif m.isdir():
                out[m.name] = ("dir", "")
            elif m.issym():
                out[m.name] = ("sym", m.linkname)
            else:
                out[m.name] = ("other", "")
    return out


def target(**kw) -> pb.WorkspaceTarget:
    return pb.WorkspaceTarget(**kw)


async def upload(stub, tgt: pb.WorkspaceTarget | None, data: bytes, chunk: int = MiB, **kw):
    async def messages():
        yield pb.UploadWorkspaceRequest(target=tgt) if tgt is not None else pb.UploadWorkspaceRequest()
        for i in range(0, len(data), chunk):
            yield pb.UploadWorkspaceRequest(data=data[i : i + chunk])

    return await stub.UploadWorkspace(messages(), **kw)


async def download(stub, tgt: pb.WorkspaceTarget, gzip: bool = False) -> tuple[bytes, int]:
    chunks = [
        m.data async for m in stub.DownloadWorkspace(pb.DownloadWorkspaceRequest(target=tgt, gzip=gzip))
    ]
    return b"".join(chunks), max((len(c) for c in chunks), default=0)


async def expect(reason: str, coro) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        await coro
    assert reason_of(info.value) == reason, info.value.details()
    return info.value


async def wait_for_state(predicate, bound_s: float = 30.0) -> None:
    """Poll until predicate() holds (bounded; a bound, not a timing assertion)."""

    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.01)

    await asyncio.wait_for(poll(), bound_s)


def files_under(root) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            out.append(os.path.relpath(os.path.join(dirpath, n), root))
    return sorted(out)


@pytest.fixture
def ws(tools):
    return make_workspace(tools.workspace)


async def test_round_trip_upload_download_upload(tools, ws):
    big = os.urandom(3 * MiB + 17)
    entries = [
        ("src", "dir"),
        ("src/main.py", "file", b"print('hi')\n", 0o755),
        ("src/empty.txt", "file", b""),
        ("data/big.bin", "file", big),
        ("data/alias", "sym", "big.bin"),
        ("top.txt", "file", "héllo\n".encode()),
        ("hard.txt", "link", "top.txt"),
    ]
    for gz in (False, True):
        dest = tools.tmp / f"ws_gz{gz}"
        resp = await upload(
            tools.stub, target(workspace=str(dest)), make_tar(entries, gz=gz), chunk=256 * 1024
        )
        assert (resp.files, resp.bytes) == (4, len(big) + 12 + 7)
        assert (dest / "src/main.py").read_bytes() == b"print('hi')\n"
        assert os.access(dest / "src/main.py", os.X_OK) and not os.access(dest / "top.txt", os.X_OK)
        assert (dest / "data/big.bin").read_bytes() == big
        assert os.readlink(dest / "data/alias") == "big.bin"
        assert os.stat(dest / "hard.txt").st_ino == os.stat(dest / "top.txt").st_ino
        owner = os.stat(dest)
        for name in ("src", "src/main.py", "data/big.bin", "top.txt"):
            st = os.stat(dest / name)
            assert (st.st_uid, st.st_gid) == (owner.st_uid, owner.st_gid)
        if os.geteuid() == 0:
            assert owner.st_uid != 0  # handed to the unprivileged sandbox uid

        archive, biggest = await download(tools.stub, target(workspace=str(dest)), gzip=gz)
        assert biggest <= MiB
        assert archive[:2] == (b"\x1f\x8b" if gz else archive[:2])
        got = read_tar(archive)
        assert got["data/big.bin"] == ("file", big)
        assert got["src/main.py"] == ("file", b"print('hi')\n")
        assert got["src/empty.txt"] == ("file", b"")
        assert got["data/alias"] == ("sym", "big.bin")
        assert got["hard.txt"] == ("file", "héllo\n".encode())
        assert got["src"] == ("dir", "")

        # and back in: the same tree again
        again = tools.tmp / f"again_gz{gz}"
        await upload(tools.stub, target(workspace=str(again)), archive)
        assert files_under(again) == files_under(dest)
        again_archive, _ = await download(tools.stub, target(workspace=str(again)))
        assert read_tar(again_archive) == got


async def test_subdirectory_targets_and_run_workspace(tools, ws):
    tar = make_tar([("a.txt", "file", b"A\n")])
    await upload(tools.stub, target(run_id="run_arch", path="deep/er"), tar)
    # the run's default workspace is where ExecuteTool runs without a workspace
    result = await tools.sh("cat deep/er/a.txt", run_id="run_arch", workspace="")
    assert result.content == "A\n", result.content
    archive, _ = await download(tools.stub, target(run_id="run_arch", path="deep"))
    assert read_tar(archive) == {"er": ("dir", ""), "er/a.txt": ("file", b"A\n")}


async def test_sandbox_target(tools, ws):
    sandbox = (await tools.stub.CreateSandbox(pb.CreateSandboxRequest(sandbox_id="sbx_arch"))).sandbox
    await upload(tools.stub, target(sandbox_id="sbx_arch"), make_tar([("in.txt", "file", b"sbx\n")]))
    result = await tools.sh("cat in.txt", sandbox_id="sbx_arch")
    assert result.content == "sbx\n"
    archive, _ = await download(tools.stub, target(sandbox_id="sbx_arch"))
    assert read_tar(archive)["in.txt"] == ("file", b"sbx\n")
    assert os.path.exists(os.path.join(sandbox.workspace, "in.txt"))
    await expect("SANDBOX_NOT_FOUND", upload(tools.stub, target(sandbox_id="sbx_nope"), b"x"))
    await expect("SANDBOX_NOT_FOUND", download(tools.stub, target(sandbox_id="sbx_nope")))


async def test_download_never_follows_links_out(tools, ws):
    secret = tools.tmp / "outside"
    secret.mkdir()
    (secret / "secret.txt").write_text("canary")
    (ws / "out").symlink_to(secret)
    (ws / "shadow").symlink_to("/etc/shadow")
    (ws / "real.txt").write_text("ok")
    os.mkfifo(ws / "pipe")
    archive, _ = await download(tools.stub, target(workspace=str(ws)))
    got = read_tar(archive)
    assert got == {
        "out": ("sym", str(secret)),
        "real.txt": ("file", b"ok"),
        "shadow": ("sym", "/etc/shadow"),
    }
    assert b"canary" not in archive
    # a target path through a link out of the workspace is refused
    await expect("PATH_OUTSIDE_WORKSPACE", download(tools.stub, target(workspace=str(ws), path="out")))


HOSTILE = [
    ("dotdot", [("../escaped.txt", "file", b"x")], "PATH_OUTSIDE_WORKSPACE"),
    ("dotdot_deep", [("a/../../escaped.txt", "file", b"x")], "PATH_OUTSIDE_WORKSPACE"),
    ("absolute", [("/tmp/escaped_abs.txt", "file", b"x")], "PATH_OUTSIDE_WORKSPACE"),
    ("abs_symlink_then_file", [("lnk", "sym", "/OUTSIDE"), ("lnk/escaped.txt", "file", b"x")],
     "PATH_OUTSIDE_WORKSPACE"),
    ("rel_symlink_then_file", [("lnk", "sym", "../../outside"), ("lnk/escaped.txt", "file", b"x")],
     "PATH_OUTSIDE_WORKSPACE"),
    ("hardlink_shadow", [("shadow", "link", "/etc/shadow")], "PATH_OUTSIDE_WORKSPACE"),
    ("hardlink_shadow_rel", [("shadow", "link", "../../../../../../../../etc/shadow")],
     "PATH_OUTSIDE_WORKSPACE"),
    ("device", [("null", "chr")], "MALFORMED_ARCHIVE"),
    ("fifo", [("pipe", "fifo")], "MALFORMED_ARCHIVE"),
]  # fmt: skip


@pytest.mark.parametrize("name,entries,reason", HOSTILE, ids=[h[0] for h in HOSTILE])
async def test_hostile_archives_leave_nothing_outside(tools, ws, name, entries, reason):
    outside = tools.tmp / "outside"
    outside.mkdir(exist_ok=True)
    before_tmp = set(os.listdir(tools.tmp))
    resolved = [(n, k, *(r.replace("/OUTSIDE", str(outside)) if isinstance(r, str) else r for r in rest))
                for n, k, *rest in entries]  # fmt: skip
    await expect(reason, upload(tools.stub, target(workspace=str(ws), path="sub"), make_tar(resolved)))
    assert os.listdir(outside) == []
    assert set(os.listdir(tools.tmp)) == before_tmp
    assert not os.path.exists("/tmp/escaped_abs.txt")
    for path in files_under(ws):
        assert not os.path.islink(ws / path) or not os.path.isabs(os.readlink(ws / path))
    # the server keeps serving
    assert (await tools.stub.ListTools(pb.ListToolsRequest())).tools


async def test_symlink_already_in_the_workspace_cannot_carry_a_write_out(tools, ws):
    outside = tools.tmp / "outside"
    outside.mkdir()
    (ws / "planted").symlink_to(outside)  # as a command in the sandbox could have done
    (ws / "inner").symlink_to("planted")
    for name in ("planted/pwned.txt", "inner/pwned.txt"):
        await expect(
            "PATH_OUTSIDE_WORKSPACE",
            upload(tools.stub, target(workspace=str(ws)), make_tar([(name, "file", b"x")])),
        )
    await expect(
        "PATH_OUTSIDE_WORKSPACE",
        upload(tools.stub, target(workspace=str(ws), path="planted"), make_tar([("p.txt", "file", b"x")])),
    )
    assert os.listdir(outside) == []
    # a file member over a link leading out is refused; over a link inside, it replaces
    # the link itself and never writes through it
    (ws / "victim").symlink_to(outside / "target.txt")
    await expect(
        "PATH_OUTSIDE_WORKSPACE",
        upload(tools.stub, target(workspace=str(ws)), make_tar([("victim", "file", b"mine")])),
    )
    assert os.listdir(outside) == []
    (ws / "real.txt").write_text("keep")
    (ws / "alias").symlink_to("real.txt")
    await upload(tools.stub, target(workspace=str(ws)), make_tar([("alias", "file", b"mine")]))
    assert not (ws / "alias").is_symlink() and (ws / "alias").read_bytes() == b"mine"
    assert (ws / "real.txt").read_text() == "keep"


async def test_huge_declared_size_is_refused_before_writing(tools, ws):
    info = tarfile.TarInfo("huge.bin")
    info.size = 10**12
    archive = info.tobuf(tarfile.PAX_FORMAT) + b"\0" * 4096
    err = await expect("REQUEST_TOO_LARGE", upload(tools.stub, target(workspace=str(ws)), archive))
    assert grpc.StatusCode.INVALID_ARGUMENT == err.code()
    assert not (ws / "huge.bin").exists()
    assert not [n for n in os.listdir(ws) if n.endswith(".tmp")]


async def test_malformed_and_truncated_archives(tools, ws):
    for data in (
        os.urandom(5000),
        b"\x1f\x8b" + os.urandom(3000),
        make_tar([("a", "file", b"x" * 5000)])[:1500],
    ):
        await expect("MALFORMED_ARCHIVE", upload(tools.stub, target(workspace=str(ws)), data))
    await expect("MALFORMED_ARCHIVE", upload(tools.stub, target(workspace=str(ws)), b""))
    assert not [n for n in os.listdir(ws) if n.endswith(".tmp")]


async def test_bad_requests(tools, ws):
    tar = make_tar([("a", "file", b"x")])
    await expect("MISSING_FIELD", upload(tools.stub, None, tar))
    await expect("MISSING_FIELD", upload(tools.stub, target(path="x"), tar))
    await expect("INVALID_ID", upload(tools.stub, target(run_id="bad id!"), tar))
    await expect("INVALID_VALUE", upload(tools.stub, target(workspace="relative/dir"), tar))
    await expect("INVALID_VALUE", upload(tools.stub, target(workspace="/etc"), tar))
    await expect("INVALID_VALUE", upload(tools.stub, target(workspace=str(ws), sandbox_id="sbx_x"), tar))
    await expect("PATH_OUTSIDE_WORKSPACE", upload(tools.stub, target(workspace=str(ws), path="../up"), tar))
    await expect("PATH_OUTSIDE_WORKSPACE", upload(tools.stub, target(workspace=str(ws), path="/abs"), tar))
    await expect("WORKSPACE_NOT_FOUND", download(tools.stub, target(workspace=str(ws), path="missing")))
    await expect("MISSING_FIELD", download(tools.stub, pb.WorkspaceTarget()))
    (ws / "file").write_text("x")
    await expect("INVALID_VALUE", download(tools.stub, target(workspace=str(ws), path="file")))

    async def twice():
        yield pb.UploadWorkspaceRequest(target=target(workspace=str(ws)), data=tar[:512])
        yield pb.UploadWorkspaceRequest(target=target(workspace=str(ws)), data=tar[512:])

    await expect("INVALID_VALUE", tools.stub.UploadWorkspace(twice()))
    # a message over 1 MiB
    await expect(
        "REQUEST_TOO_LARGE", upload(tools.stub, target(workspace=str(ws)), b"\0" * (MiB + 1), chunk=2 * MiB)
    )
    # a directory member over an existing file, a file member over an existing directory
    (ws / "d").mkdir()
    await expect(
        "INVALID_VALUE", upload(tools.stub, target(workspace=str(ws)), make_tar([("d", "file", b"x")]))
    )
    await expect("INVALID_VALUE", upload(tools.stub, target(workspace=str(ws)), make_tar([("file", "dir")])))
    assert (await tools.stub.ListTools(pb.ListToolsRequest())).tools


async def test_archive_bound_is_configurable(start_server, tmp_path):
    config = make_config(tmp_path, max_archive_bytes=64 * 1024)
    address = await start_server(build_server(config))
    ws = tmp_path / "ws"
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        # as sent
        big = make_tar([("r.bin", "file", os.urandom(100 * 1024))])
        await expect("REQUEST_TOO_LARGE", upload(stub, target(workspace=str(ws)), big, chunk=16 * 1024))
        # content unpacked from a small gzip (a bomb)
        bomb = make_tar([("zeros.bin", "file", b"\0" * (2 * MiB))], gz=True)
        assert len(bomb) < 64 * 1024
        await expect("REQUEST_TOO_LARGE", upload(stub, target(workspace=str(ws)), bomb))
        assert not (ws / "zeros.bin").exists()
        ok = await upload(stub, target(workspace=str(ws)), make_tar([("s.txt", "file", b"small")]))
        assert ok.files == 1


async def test_upload_needs_the_token(start_server, tmp_path):
    config = make_config(tmp_path)
    config = type(config)(server=ServerConfig(port=0, state_dir=config.server.state_dir, auth_token="sekrit"))
    address = await start_server(build_server(config))
    ws = tmp_path / "ws"
    tar = make_tar([("a.txt", "file", b"x")])
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ToolServiceStub(channel)
        await expect("UNAUTHENTICATED", upload(stub, target(workspace=str(ws)), tar))
        assert not (ws / "a.txt").exists()
        resp = await upload(
            stub, target(workspace=str(ws)), tar, metadata=(("authorization", "Bearer sekrit"),)
        )
        assert resp.files == 1


async def test_abandoned_transfers_free_their_workers(tools, ws):
    """More abandoned transfers than worker threads, then a full round trip still works."""
    (ws / "big.bin").write_bytes(os.urandom(6 * MiB))
    for _ in range(10):
        call = tools.stub.DownloadWorkspace(pb.DownloadWorkspaceRequest(target=target(workspace=str(ws))))
        async for _first in call:
            break
        call.cancel()

    gate = asyncio.Event()
    tar = make_tar([("up.bin", "file", os.urandom(3 * MiB))])
    for i in range(10):

        async def stalled(i=i):
            yield pb.UploadWorkspaceRequest(target=target(workspace=str(tools.tmp / f"s{i}")), data=tar[:MiB])
            await gate.wait()  # never set: the client stops sending

        call = tools.stub.UploadWorkspace(stalled())
        dest = tools.tmp / f"s{i}"
        # the worker is mid-file, waiting for data that never comes: a temporary file shows it
        await wait_for_state(lambda d=dest: d.is_dir() and any(n.endswith(".tmp") for n in os.listdir(d)))
        call.cancel()
        # the abandoned file's temporary is removed, nothing half-written is left
        await wait_for_state(lambda d=dest: os.listdir(d) == [])
    archive, _ = await asyncio.wait_for(download(tools.stub, target(workspace=str(ws))), 30)
    assert len(read_tar(archive)["big.bin"][1]) == 6 * MiB
    resp = await asyncio.wait_for(upload(tools.stub, target(workspace=str(tools.tmp / "final")), tar), 30)
    assert resp.files == 1


async def test_archive_made_by_gnu_tar_of_a_directory(tools, ws):
    """The everyday `tar -czf - -C dir .`: a "./" root entry and "./"-prefixed names."""
    import subprocess

    src = tools.tmp / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("x = 1\n")
    (src / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (src / "run.sh").chmod(0o755)
    (src / "link").symlink_to("pkg/mod.py")
    data = subprocess.run(["tar", "-czf", "-", "-C", str(src), "."], check=True, capture_output=True).stdout
    assert "." in read_tar(data) and "./pkg/mod.py" in read_tar(data)
    resp = await upload(tools.stub, target(workspace=str(ws), path="proj"), data)
    assert resp.files == 2
    assert (ws / "proj/pkg/mod.py").read_text() == "x = 1\n"
    assert os.access(ws / "proj/run.sh", os.X_OK)
    assert os.readlink(ws / "proj/link") == "pkg/mod.py"
    result = await tools.sh("sh proj/run.sh && cat proj/link")
    assert result.content == "hi\nx = 1\n", result.content
