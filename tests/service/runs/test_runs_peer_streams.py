"""A run's turn calls go over its streams of calls to its peers (runs/peers/streams.py, decision 0023).

Real servers on 127.0.0.1:0: a tool run makes its StreamGenerate, ExecuteTool and
AppendEntries calls over one stream per peer (one stream of each opened for the whole run,
each call counted at the server as an RPC of its own method); a peer that does not serve
the streams (an older version) is called with the plain RPCs and the run is the same. A
stream broken under a call by a killed replica is the e2e chaos tests' (tests/e2e).
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry

from agentrt.runs.peers import streams as peer_calls
from agentrt.sessions.servicer import SessionServicer
from agentrt.tools.servicer import ToolServicer
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as spb_grpc
from agentrt.v1 import tool_service_pb2_grpc as tpb_grpc
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent, start_mesh


def _count(registry: CollectorRegistry, method: str) -> float:
    return sum(
        s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "agentrt_rpc_server_requests_total" and s.labels.get("method") == method
    )


def _opened(monkeypatch) -> list[peer_calls.RunCalls]:
    """Keep every RunCalls the run loop makes (to read how many streams each opened)."""
    made: list[peer_calls.RunCalls] = []
    original = peer_calls.RunCalls.__init__

    def init(self, *args, **kw):  # type: ignore[no-untyped-def]
        original(self, *args, **kw)
        made.append(self)

    monkeypatch.setattr(peer_calls.RunCalls, "__init__", init)
    return made


async def _tool_run(mesh, turns: int) -> tuple[list[pb.RunEvent], list[str]]:
    """Run `turns` read_file turns and a final answer; return the events and the session's items."""
    (Path(mesh.work) / "notes.txt").write_text("hello\n")
    call = ToolCallReply("read_file", '{"path": "notes.txt"}')
    mesh.emu.script([Reply(tool_calls=[call]) for _ in range(turns)] + [Reply(text="done")])
    started = await mesh.runs.StartRun(pb.StartRunRequest(agent=agent(), input="go", workspace=mesh.work))
    events = await mesh.events(started.run_id)
    assert events[-2].run_completed.status == cpb.RUN_STATUS_COMPLETED, events[-2]
    entries = await mesh.entries(started.session_id)
    kinds = ("message", "tool_call", "tool_result")
    return events, [next((k for k in kinds if e.item.HasField(k)), "") for e in entries]


async def test_a_runs_turn_calls_go_over_one_stream_per_peer(mesh, monkeypatch):
    made = _opened(monkeypatch)
    _, items = await _tool_run(mesh, 3)
    assert items == ["message", *["tool_call", "tool_result"] * 3, "message"]
    assert len(made) == 1
    opened = {peer: s.opened for peer, s in made[0].streams.items()}
    assert opened == {"sessions": 1, "tools": 1, "gateway": 1}
    registry = mesh.tools_server.registry
    assert _count(registry, "ExecuteToolCalls") == 1  # one stream ...
    assert _count(registry, "ExecuteTool") == 3  # ... carrying the three calls, counted as such
    assert len([p for p, _ in mesh.emu.requests if p.endswith("/responses")]) == 4


async def test_peers_without_the_streams_are_called_with_the_rpcs(
    start_server, tmp_path, emulator, monkeypatch
):
    # An older tool service and session store: their servicers lack the streams (the
    # generated base answers UNIMPLEMENTED); the run falls back to ExecuteTool and
    # AppendEntries and ends as it would have.
    monkeypatch.setattr(ToolServicer, "ExecuteToolCalls", tpb_grpc.ToolServiceServicer.ExecuteToolCalls)
    monkeypatch.setattr(
        SessionServicer, "AppendEntriesCalls", spb_grpc.SessionServiceServicer.AppendEntriesCalls
    )
    mesh = await start_mesh(start_server, tmp_path, emulator)  # built with the older servicers
    made = _opened(monkeypatch)
    events, items = await _tool_run(mesh, 2)
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds.count("tool_returned") == 2 and kinds.count("items_persisted") == 4
    assert items == ["message", *["tool_call", "tool_result"] * 2, "message"]
    assert made[0].unsupported == {"tools", "sessions"}
    registry = mesh.tools_server.registry
    assert _count(registry, "ExecuteToolCalls") == 1  # refused once, never opened again
    assert _count(registry, "ExecuteTool") == 2  # the calls went as RPCs


async def test_in_one_process_the_turn_calls_cross_no_wire(start_server, tmp_path, emulator, monkeypatch):
    # `agentrt serve all`'s shape (decision 0056): the runs service hosts its peers' streams
    # of calls in process. The run is the same; no stream RPC reaches a peer's server, and
    # each call is still counted and traced as an RPC of its own method there.
    mesh = await start_mesh(start_server, tmp_path, emulator, local=True)
    made = _opened(monkeypatch)
    events, items = await _tool_run(mesh, 3)
    assert items == ["message", *["tool_call", "tool_result"] * 3, "message"]
    kinds = [e.WhichOneof("payload") for e in events]
    assert kinds.count("tool_returned") == 3 and kinds.count("items_persisted") == 5
    assert made[0].local == {"sessions", "tools", "gateway"}
    assert {peer: s.opened for peer, s in made[0].streams.items()} == {
        "sessions": 1,
        "tools": 1,
        "gateway": 1,
    }
    tools = mesh.tools_server.registry
    assert _count(tools, "ExecuteToolCalls") == 0  # no stream over the wire ...
    assert _count(tools, "ExecuteTool") == 3  # ... and the three calls counted at the tool service
    assert len([p for p, _ in mesh.emu.requests if p.endswith("/responses")]) == 4
