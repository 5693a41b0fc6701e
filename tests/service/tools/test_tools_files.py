"""The in-process file tools and apply_patch: confined to the workspace, symlinks included."""

from __future__ import annotations

import json
import os

import pytest
from tools_helpers import make_workspace

from agentrt.v1 import common_pb2


def _reason(result: common_pb2.ToolResult) -> str:
    return json.loads(result.details_json).get("reason", "")


@pytest.fixture
def ws(tools):
    return make_workspace(tools.workspace)


async def test_write_read_list_round_trip(tools, ws):
    wrote = await tools.run("write_file", {"path": "dir/sub/a.txt", "content": "héllo\n"}, call_id="w")
    assert not wrote.result.is_error, wrote.result.content
    assert (ws / "dir" / "sub" / "a.txt").read_text() == "héllo\n"
    read = await tools.run("read_file", {"path": "dir/sub/a.txt"}, call_id="r")
    assert read.result.content == "héllo\n"
    listed = await tools.run("list_files", {"path": "dir", "recursive": True}, call_id="l")
    assert listed.result.content.splitlines() == ["sub/", "sub/a.txt"]
    top = await tools.run("list_files", {}, call_id="l2")
    assert "dir/" in top.result.content.splitlines()
    # absolute paths inside the workspace are fine
    absolute = await tools.run("read_file", {"path": str(ws / "dir/sub/a.txt")}, call_id="r2")
    assert absolute.result.content == "héllo\n"


async def test_files_written_by_tools_are_usable_by_commands(tools, ws):
    await tools.run("write_file", {"path": "notes/n.txt", "content": "one\n"}, call_id="w")
    result = await tools.sh("echo two >> notes/n.txt && touch notes/new && cat notes/n.txt")
    assert not result.is_error, result.content
    assert result.content == "one\ntwo\n"


async def test_read_file_caps_large_files(tools, ws):
    (ws / "big.txt").write_text("".join(f"{i}\n" for i in range(100000)))
    resp = await tools.run("read_file", {"path": "big.txt"}, max_output_bytes=1000)
    assert resp.result.output_truncated
    assert resp.result.content.startswith("0\n1\n2\n")
    assert resp.result.content.endswith("99999\n")
    assert "bytes of output dropped" in resp.result.content


async def test_missing_and_wrong_kind_are_error_results(tools, ws):
    (ws / "d").mkdir()
    missing = await tools.run("read_file", {"path": "nope.txt"}, call_id="a")
    assert missing.result.is_error and _reason(missing.result) == "NOT_FOUND"
    directory = await tools.run("read_file", {"path": "d"}, call_id="b")
    assert directory.result.is_error and _reason(directory.result) == "NOT_A_FILE"
    os.mkfifo(ws / "fifo")
    fifo = await tools.run("read_file", {"path": "fifo"}, call_id="c")  # must not hang the service
    assert fifo.result.is_error and _reason(fifo.result) == "NOT_A_FILE"
    no_path = await tools.run("write_file", {"content": "x"}, call_id="d")
    assert no_path.result.is_error and _reason(no_path.result) == "INVALID_ARGUMENTS"


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("read_file", {"path": "../outside.txt"}),
        ("read_file", {"path": "/etc/hostname"}),
        ("read_file", {"path": "sub/../../outside.txt"}),
        ("read_file", {"path": "link_out/hostname"}),
        ("read_file", {"path": "file_link"}),
        ("write_file", {"path": "../outside.txt", "content": "x"}),
        ("write_file", {"path": "/tmp/agentrt-outside.txt", "content": "x"}),
        ("write_file", {"path": "link_out/planted.txt", "content": "x"}),
        ("write_file", {"path": "link_up/planted.txt", "content": "x"}),
        ("write_file", {"path": "file_link", "content": "x"}),
        ("list_files", {"path": ".."}),
        ("list_files", {"path": "link_up"}),
    ],
)
async def test_escapes_are_refused_and_write_nothing(tools, ws, tool, args):
    outside = tools.tmp / "outside_dir"
    outside.mkdir()
    (tools.tmp / "outside_file.txt").write_text("secret")
    (ws / "sub").mkdir()
    os.symlink("/etc", ws / "link_out")
    os.symlink(str(outside), ws / "link_up")
    os.symlink(str(tools.tmp / "outside_file.txt"), ws / "file_link")
    before = sorted(p.name for p in tools.tmp.iterdir())
    resp = await tools.run(tool, args)
    assert resp.result.is_error, resp.result.content
    assert _reason(resp.result) == "PATH_OUTSIDE_WORKSPACE"
    assert "secret" not in resp.result.content
    assert sorted(p.name for p in tools.tmp.iterdir()) == before
    assert list(outside.iterdir()) == []
    assert (tools.tmp / "outside_file.txt").read_text() == "secret"
    assert not os.path.exists("/tmp/agentrt-outside.txt")
    assert not os.path.exists("/etc/planted.txt")


async def test_symlinks_that_stay_inside_are_followed(tools, ws):
    (ws / "real").mkdir()
    (ws / "real" / "f.txt").write_text("inside")
    os.symlink("real", ws / "alias")
    os.symlink(str(ws / "real" / "f.txt"), ws / "abs_link")
    assert (await tools.run("read_file", {"path": "alias/f.txt"}, call_id="a")).result.content == "inside"
    assert (await tools.run("read_file", {"path": "abs_link"}, call_id="b")).result.content == "inside"
    wrote = await tools.run("write_file", {"path": "alias/g.txt", "content": "new"}, call_id="c")
    assert not wrote.result.is_error
    assert (ws / "real" / "g.txt").read_text() == "new"


async def test_write_replaces_the_link_target_not_a_hard_link(tools, ws):
    (ws / "a.txt").write_text("original")
    os.link(ws / "a.txt", ws / "b.txt")
    await tools.run("write_file", {"path": "b.txt", "content": "changed"})
    assert (ws / "b.txt").read_text() == "changed"
    assert (ws / "a.txt").read_text() == "original"  # written by rename, never through the link


async def test_apply_patch_binds_whole_lines_only(tools, ws):
    # "x = 1" is a substring of "max = 10", which comes first: it must bind to its own line
    (ws / "m.py").write_text("max = 10\nx = 1\n")
    patch = "*** Begin Patch\n*** Update File: m.py\n@@\n-x = 1\n+x = 2\n*** End Patch\n"
    resp = await tools.run("apply_patch", {"patch": patch}, call_id="p1")
    assert not resp.result.is_error, resp.result.content
    assert (ws / "m.py").read_text() == "max = 10\nx = 2\n"
    # and never inside a longer (indented) line
    (ws / "i.py").write_text("def f():\n    x = 1\n")
    patch = "*** Begin Patch\n*** Update File: i.py\n-x = 1\n+x = 3\n*** End Patch\n"
    resp = await tools.run("apply_patch", {"patch": patch}, call_id="p2")
    assert resp.result.is_error
    assert (ws / "i.py").read_text() == "def f():\n    x = 1\n"


async def test_apply_patch_anchor_without_indentation_lands(tools, ws):
    (ws / "c.py").write_text(
        "class A:\n    def go(self):\n        return 1\n\n    def stop(self):\n        return 1\n"
    )
    patch = (
        "*** Begin Patch\n*** Update File: c.py\n@@ def stop(self):\n-        return 1\n+        return 2\n"
        "*** End Patch"
    )
    resp = await tools.run("apply_patch", {"patch": patch})
    assert not resp.result.is_error, resp.result.content
    assert (ws / "c.py").read_text().endswith("    def stop(self):\n        return 2\n")
    assert "def go(self):\n        return 1\n" in (ws / "c.py").read_text()


async def test_apply_patch_failing_hunk_touches_nothing(tools, ws):
    (ws / "a.txt").write_text("alpha\nbeta\n")
    (ws / "b.txt").write_text("one\ntwo\n")
    patch = (
        "*** Begin Patch\n*** Update File: a.txt\n-alpha\n+ALPHA\n*** Update File: b.txt\n-three\n+3\n"
        "*** Add File: c.txt\n+new\n*** End Patch"
    )
    resp = await tools.run("apply_patch", {"patch": patch})
    assert resp.result.is_error
    assert "b.txt" in resp.result.content
    assert (ws / "a.txt").read_text() == "alpha\nbeta\n"
    assert not (ws / "c.txt").exists()


async def test_apply_patch_add_delete_move(tools, ws):
    (ws / "old.txt").write_text("keep\nchange\n")
    (ws / "gone.txt").write_text("bye\n")
    patch = (
        "*** Begin Patch\n*** Add File: new/n.txt\n+hello\n*** Delete File: gone.txt\n"
        "*** Update File: old.txt\n*** Move to: moved.txt\n keep\n-change\n+changed\n*** End Patch"
    )
    resp = await tools.run("apply_patch", {"patch": patch})
    assert not resp.result.is_error, resp.result.content
    assert (ws / "new" / "n.txt").read_text() == "hello\n"
    assert not (ws / "gone.txt").exists()
    assert not (ws / "old.txt").exists()
    assert (ws / "moved.txt").read_text() == "keep\nchanged\n"
    escape = "*** Begin Patch\n*** Add File: ../evil.txt\n+x\n*** End Patch"
    resp = await tools.run("apply_patch", {"patch": escape}, call_id="p_escape")
    assert resp.result.is_error and not (tools.tmp / "evil.txt").exists()
