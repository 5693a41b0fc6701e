"""Every backend of the runs and sessions databases terminated mid-run (decision 0059).

Runs take fast tool turns on PostgreSQL while a killer terminates every connection to the
runs and sessions databases over and over, and a client appends to its own session. Runs must
complete or fail with a clear status, AppendEntries must answer OK or UNAVAILABLE, nothing may
be written twice, and both services must serve normally afterwards.
"""

from __future__ import annotations

import asyncio
import random

import asyncpg
import grpc
import pytest

from agentrt.runs.events.notify import libpq_dsn
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb
from tests.emulators.providers import Reply, ToolCallReply
from tests.service.runs.harness import agent, start_mesh

DONE = (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED)
RUNS = 4
TURNS = 12


async def _wait(mesh, run_id, errors):
    async def poll():
        while True:
            try:
                run = (await mesh.runs.GetRun(pb.GetRunRequest(run_id=run_id))).run
            except grpc.aio.AioRpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    errors.append(f"GetRun {e.code().name}: {e.details()}")
                await asyncio.sleep(0.02)
                continue
            if run.status in DONE:
                return run
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), 20)


@pytest.mark.postgres
@pytest.mark.parametrize("target", ["runs", "sessions"])
async def test_runs_and_appends_survive_backends_terminated(start_server, tmp_path, emulator, target):
    mesh = await start_mesh(start_server, tmp_path, emulator, pg=True)
    runs_db = mesh.runs_server.config.db_url.rsplit("/", 1)[1]  # type: ignore[attr-defined]
    admin = await asyncpg.connect(libpq_dsn(mesh.runs_server.config.db_url))  # type: ignore[attr-defined]
    # the sessions database of this mesh: the one its sessions server holds connections to
    sessions_db = await admin.fetchval(
        "SELECT datname FROM pg_database WHERE datname LIKE 'sessions_test%' ORDER BY oid DESC LIMIT 1"
    )
    rng = random.Random(11)
    replies = []
    for _ in range(RUNS):
        replies += [Reply(tool_calls=[ToolCallReply("list_files", "{}")]) for _ in range(TURNS)]
        replies.append(Reply(text="done"))
    mesh.emu.script(replies * 3)
    done = asyncio.Event()
    kills = [0]
    codes: list[grpc.StatusCode] = []
    details: list[str] = []

    async def killer() -> None:
        me = await admin.fetchval("SELECT pg_backend_pid()")
        end = asyncio.get_running_loop().time() + 3.0
        while not done.is_set() and asyncio.get_running_loop().time() < end:
            n = await admin.fetchval(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = ANY($1::text[]) AND pid <> $2",
                [runs_db if target == "runs" else sessions_db],
                me,
            )
            kills[0] += n
            await asyncio.sleep(rng.uniform(0.01, 0.06))

    session = (await mesh.sessions.CreateSession(spb.CreateSessionRequest())).session

    async def appender() -> None:
        i = 0
        while not done.is_set():
            msg = cpb.Message(
                role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=f"m{i}"))]
            )
            entry = spb.Entry(
                kind="item", entry_id=f"e{i}", item=spb.Item(message=msg, source=spb.ITEM_SOURCE_USER)
            )
            try:
                await mesh.sessions.AppendEntries(
                    spb.AppendEntriesRequest(
                        session=spb.SessionRef(session_id=session.session_id), entries=[entry]
                    )
                )
                codes.append(grpc.StatusCode.OK)
                i += 1
            except grpc.aio.AioRpcError as e:
                codes.append(e.code())
                details.append(f"{e.code()}: {e.details()}")
                if e.code() != grpc.StatusCode.UNAVAILABLE:
                    i += 1
            await asyncio.sleep(0.005)

    k = asyncio.create_task(killer())
    a = asyncio.create_task(appender())
    started = []
    rpc_errors: list[str] = []
    start_errors: list[str] = []
    try:
        for _ in range(RUNS):
            try:
                started.append(
                    await mesh.runs.StartRun(
                        pb.StartRunRequest(agent=agent(limits=pb.AgentLimits(max_turns=200)), input="go")
                    )
                )
            except grpc.aio.AioRpcError as e:
                start_errors.append(f"StartRun {e.code()}: {e.details()}")
        finals = [await _wait(mesh, s.run_id, rpc_errors) for s in started]
    finally:
        done.set()
        await asyncio.gather(k, a, return_exceptions=True)
    await admin.close()
    print("KILLS", kills[0], "codes", {c: codes.count(c) for c in set(codes)})
    problems = [e for e in start_errors if "UNAVAILABLE" not in e] + rpc_errors
    for s, run in zip(started, finals, strict=True):
        if run.status == cpb.RUN_STATUS_FAILED and run.failure.kind == "internal":
            problems.append(f"{s.run_id} failed: {run.failure.kind} {run.failure.message}")
        events = await mesh.events(s.run_id)
        seqs = [e.seq for e in events if e.WhichOneof("payload") != "gap"]
        if len(seqs) != len(set(seqs)):
            problems.append(f"{s.run_id}: an event seq twice")
        entries = await mesh.entries(s.session_id)
        ids = [e.entry_id for e in entries]
        if len(ids) != len(set(ids)):
            problems.append(f"{s.run_id}: a session entry id twice")
        calls = [e.item.tool_call.call_id for e in entries if e.item.HasField("tool_call")]
        if len(calls) != len(set(calls)):
            problems.append(f"{s.run_id}: a tool call entry twice")
    bad = [
        d
        for d, c in zip(details, [c for c in codes if c != grpc.StatusCode.OK], strict=True)
        if c not in (grpc.StatusCode.UNAVAILABLE,)
    ]
    if bad:
        problems.append(f"AppendEntries answered other than OK/UNAVAILABLE: {bad[:5]}")
    own = [e.item.message.content[0].text.text for e in await mesh.entries(session.session_id)]
    if len(own) != len(set(own)):
        problems.append(f"appended twice: {[t for t in own if own.count(t) > 1][:5]}")
    # afterwards: both services serve normally
    after = await mesh.runs.StartRun(
        pb.StartRunRequest(agent=agent(limits=pb.AgentLimits(max_turns=200)), input="go")
    )
    run = await mesh.wait_status(after.run_id, *DONE)
    if run.status != cpb.RUN_STATUS_COMPLETED:
        problems.append(f"a run after the chaos: {run.status} {run.failure.message}")
    print("PROBLEMS", *problems, sep="\n  ")
    assert not problems, problems
