"""Issue 13 acceptance: the mesh as replicas behind one DNS name per service, on PostgreSQL.

Three runs replicas and two of every other service, each its own `agentrt serve` process
on its own address (scale_helpers.ScaledMesh), every peer reached through
`<svc>.agentrt.test` resolving to all of its replicas. Runs of 5 turns (4 tool turns, each
appending a line to a file in the run's workspace, then an answer) are started through the
runs name; each run's event stream is read from a runs replica other than the one executing
it. In every phase:

- every run completes (a run whose tool call was cut by a killed tools replica may instead
  suspend, with its suspension reason set: a reconciliation);
- every stream read on another replica holds exactly the run's stored events, in seq order
  (a range a killed replica reserved and never wrote may show as an EventGap, nothing else);
- the provider emulator received each model request (run, turn) exactly once, and each
  tool call's line is in its file exactly once (at most once for a call left to a
  reconciliation);
- no lease was held by two replicas at once, from the fencing tokens in the run log;
- the client saw no error but UNAVAILABLE, which it retried (StartRun with its idempotency key).

Phases: steady load; kill -9 of one runs, one tools, one sessions replica (separately) mid-load
(each started again afterwards); a rolling restart (SIGTERM, drain, start again) of every
replica of every service in turn under load. At the end: the gateway replicas together kept
within one input-token budget per limiter window, by the emulator's own intake log.

Counts are scaled down for CI (AGENTRT_SCALE_RUNS runs per phase, default 8); the issue's
full size is `AGENTRT_SCALE_RUNS=200 make test-scale` (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest
from chaos_helpers import wait_serving
from e2e_helpers import STATE_TIMEOUT
from scale_helpers import LIMITER_WINDOW_SECONDS, Replica, Responder, ScaledMesh, tag_of, turn_of

from agentrt.client.channels import open_channel
from agentrt.mesh.storage.db import Database
from agentrt.runs.storage.store import RunStore, lease_overlaps
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc
from tests.emulators.providers import ProviderEmulator
from tests.needs import unavailable
from tests.stores import pg_reachable

pytestmark = [pytest.mark.slow, pytest.mark.postgres]

RUNS = int(os.environ.get("AGENTRT_SCALE_RUNS", "8"))
TURNS = 5
#: Input tokens per limiter window, all gateway replicas together.
BUDGET = int(os.environ.get("AGENTRT_SCALE_BUDGET", "400000"))
#: Seconds between the runs a rolling restart's load adds while it lasts.
FEED_SECONDS = float(os.environ.get("AGENTRT_SCALE_FEED_SECONDS", "1.0"))
_TERMINAL_OR_SUSPENDED = (
    cpb.RUN_STATUS_COMPLETED,
    cpb.RUN_STATUS_FAILED,
    cpb.RUN_STATUS_CANCELED,
    cpb.RUN_STATUS_SUSPENDED,
)


responder = Responder(TURNS, tool_seconds=0.2)


@pytest.fixture(scope="module")
def scaled(tmp_path_factory):
    if not asyncio.run(pg_reachable()):
        unavailable("PostgreSQL is not reachable on 127.0.0.1:5432")
    root = tmp_path_factory.mktemp("scale")
    emu = ProviderEmulator()
    emu.responder = responder
    mesh = ScaledMesh(root, emu, BUDGET, {"runs": 3})
    try:
        mesh.start()
        yield mesh
    finally:
        mesh.close()
        emu.close()


@dataclass
class Tracked:
    """One run of a phase: its id, where it was read, what the reader received."""

    tag: str
    workspace: Path
    run_id: str = ""
    executor: str = ""
    received: list[pb.RunEvent] = field(default_factory=list)
    gaps: list[pb.EventGap] = field(default_factory=list)
    ended: bool = False


@dataclass
class Client:
    """The test's client: one channel through the runs name, errors it saw by code."""

    mesh: ScaledMesh
    channel: grpc.aio.Channel
    errors: Counter = field(default_factory=Counter)

    @property
    def stub(self) -> pb_grpc.RunServiceStub:
        return pb_grpc.RunServiceStub(self.channel)

    async def unavailable_retried(self, send):  # type: ignore[no-untyped-def]
        """Send; on UNAVAILABLE (counted) send again; any other error fails the test."""
        for _ in range(60):
            try:
                return await send()
            except grpc.aio.AioRpcError as err:
                self.errors[err.code().name] += 1
                assert err.code() == grpc.StatusCode.UNAVAILABLE, f"{err.code()} {err.details()}"
                await asyncio.sleep(0.2)
        raise AssertionError("UNAVAILABLE for 12 s")

    async def start(self, run: Tracked) -> None:
        agent = pb.AgentSpec(
            model=cpb.ModelRef(provider="openai", model="gpt-test"),
            tools=[pb.AgentTool(name="exec_command")],
            limits=pb.AgentLimits(max_turns=TURNS + 1),
        )
        req = pb.StartRunRequest(
            agent=agent, input=f"work scale:{run.tag}", workspace=str(run.workspace), idempotency_key=run.tag
        )
        started = await self.unavailable_retried(lambda: self.stub.StartRun(req, timeout=30))
        run.run_id = started.run_id

    async def get(self, run_id: str) -> pb.Run:
        resp = await self.unavailable_retried(
            lambda: self.stub.GetRun(pb.GetRunRequest(run_id=run_id), timeout=10)
        )
        return resp.run

    async def follow(self, run: Tracked, others: list[Replica]) -> None:
        """Read the run's stream on replicas other than its executor, resuming after the last seq."""
        i = 0
        while not run.ended:
            replica = others[i % len(others)]
            i += 1
            if not replica.alive():
                await asyncio.sleep(0.1)
                continue
            last = run.received[-1].seq if run.received else 0
            async with grpc.aio.insecure_channel(replica.address) as channel:
                call = pb_grpc.RunServiceStub(channel).StreamRunEvents(
                    pb.StreamRunEventsRequest(run_id=run.run_id, after_seq=last)
                )
                try:
                    async for msg in call:
                        event = msg.event
                        if event.WhichOneof("payload") == "gap":
                            run.gaps.append(event.gap)
                            continue
                        if event.seq <= last:
                            continue
                        assert event.seq > last, f"{run.run_id}: seq {event.seq} after {last}"
                        run.received.append(event)
                        last = event.seq
                        if event.WhichOneof("payload") == "stream_end":
                            run.ended = True
                            return
                except grpc.aio.AioRpcError as err:
                    self.errors[err.code().name] += 1
                    assert err.code() == grpc.StatusCode.UNAVAILABLE, f"{err.code()} {err.details()}"
            await asyncio.sleep(0.05)


async def _executor(db: Database, run_id: str) -> str:
    async with db.read() as conn:
        from sqlalchemy import text

        return await conn.scalar(text("SELECT lease_owner FROM runs WHERE run_id = :r"), {"r": run_id}) or ""


async def _phase(  # type: ignore[no-untyped-def]
    mesh: ScaledMesh, name: str, chaos=None, allow_suspend: bool = False, feed: bool = False
) -> Client:
    """Start RUNS runs, read their streams elsewhere, run `chaos` mid-load, check everything.

    With `feed`, one more run is started every FEED_SECONDS while `chaos` lasts (a rolling
    restart outlasts one batch), so the load never stops during it.
    """
    client = Client(mesh, open_channel(mesh.target("runs")))
    db = Database(mesh.runs_db_url)
    store = RunStore(db)
    runs: list[Tracked] = []
    readers: list[asyncio.Task[None]] = []

    async def launch(count: int) -> None:
        batch = []
        for _ in range(count):
            ws = mesh.root / "work" / f"{name}-{len(runs)}"  # the tool service creates it
            ws.parent.mkdir(exist_ok=True)
            batch.append(Tracked(f"{name}-{len(runs)}", ws))
            runs.append(batch[-1])
        await asyncio.gather(*(client.start(r) for r in batch))
        for run in batch:
            run.executor = await _executor(db, run.run_id)
            others = [r for r in mesh.runs if r.name != run.executor]
            readers.append(asyncio.create_task(client.follow(run, others)))

    try:
        await launch(RUNS)
        if chaos is not None:
            # mid-load: once the runs have made about a third of their model calls
            want = RUNS * TURNS // 3

            async def progressed() -> None:
                while sum(1 for _, b in mesh.emu.requests if tag_of(b).startswith(name + "-")) < want:
                    await asyncio.sleep(0.05)

            await asyncio.wait_for(progressed(), STATE_TIMEOUT)
            unfinished = await _unfinished(db, [r.run_id for r in runs])
            assert unfinished, "the load had ended before the chaos began: the phase proves nothing"
            mesh.unfinished_at_chaos = unfinished  # type: ignore[attr-defined]
            task = asyncio.create_task(chaos(mesh))
            while feed and not task.done():
                await asyncio.sleep(FEED_SECONDS)
                if not task.done():
                    await launch(1)
            await task

        async def settled() -> list[pb.Run]:
            while True:
                got = [await client.get(r.run_id) for r in runs]
                if all(g.status in _TERMINAL_OR_SUSPENDED for g in got):
                    return got
                await asyncio.sleep(0.2)

        final = await asyncio.wait_for(settled(), STATE_TIMEOUT * 2)
        for run, got in zip(runs, final, strict=True):
            if got.status == cpb.RUN_STATUS_SUSPENDED and allow_suspend:
                assert got.suspension_reason != pb.SUSPENSION_REASON_UNSPECIFIED, got
                continue
            assert got.status == cpb.RUN_STATUS_COMPLETED, (run.tag, str(got.failure))
            asked = sorted(turn_of(b) for _, b in mesh.emu.requests if tag_of(b) == run.tag)
            assert got.turns == TURNS, (run.tag, got.turns, asked, str(got.diagnostics)[:2000])
        completed = {
            r.run_id for r, g in zip(runs, final, strict=True) if g.status == cpb.RUN_STATUS_COMPLETED
        }
        await asyncio.wait_for(
            asyncio.gather(*(t for r, t in zip(runs, readers, strict=True) if r.run_id in completed)),
            STATE_TIMEOUT,
        )
        for run, reader in zip(runs, readers, strict=True):
            if run.run_id not in completed:
                reader.cancel()
        await _check(mesh, store, client, runs, completed, killed_runs=chaos is not None)
    finally:
        await client.channel.close()
        await db.close()
    return client


async def _unfinished(db: Database, run_ids: list[str]) -> dict[str, str]:
    """run id -> lease owner of the runs still RUNNING."""
    from sqlalchemy import bindparam, text

    query = text("SELECT run_id, lease_owner FROM runs WHERE status = 1 AND run_id IN :ids").bindparams(
        bindparam("ids", expanding=True)
    )
    async with db.read() as conn:
        return dict((await conn.execute(query, {"ids": run_ids})).all())


async def _check(mesh, store, client, runs, completed, killed_runs) -> None:  # type: ignore[no-untyped-def]
    killed = getattr(mesh, "killed_runs_replica", None)  # (name, emulator request index at the kill)
    requests = Counter((tag_of(b), turn_of(b)) for _, b in mesh.emu.requests if tag_of(b))
    for run in runs:
        # the stream read elsewhere holds exactly what storage holds, in seq order
        stored = [
            e for e in (await store.read_events(run.run_id, 0)) if e.event.WhichOneof("payload") != "gap"
        ]
        want = [s.event.SerializeToString() for s in stored]
        got = [e.SerializeToString() for e in run.received]
        if run.run_id in completed:
            assert got == want, f"{run.tag}: the stream read on another replica differs from storage"
        else:
            assert got == want[: len(got)], run.tag
        if not killed_runs:
            assert run.gaps == [], (run.tag, run.gaps)
        # each model request once, a runs replica killed mid model call included: the
        # gateway finishes the dead replica's call and journals it, and the new owner's
        # repeat (same key) is answered from the journal
        turns = [n for (tag, n), _ in requests.items() if tag == run.tag]
        twice = [n for n in turns if requests[(run.tag, n)] != 1]
        assert twice == [], (run.tag, twice, killed)
        if run.run_id in completed:
            assert sorted(turns) == list(range(1, TURNS + 1))
        # each side effect once per call
        path = run.workspace / "lines.txt"
        lines = path.read_text().split() if path.exists() else []
        assert len(lines) == len(set(lines)), f"{run.tag}: a tool call ran twice: {lines}"
        if run.run_id in completed:
            assert sorted(lines) == sorted(f"line-{run.tag}-{t}" for t in range(1, TURNS))
        # no lease held by two replicas at once
        assert lease_overlaps(await store.log_leases(run.run_id)) == [], run.tag
    assert set(client.errors) <= {"UNAVAILABLE"}, client.errors


async def test_load_on_replicas_completes_with_streams_read_elsewhere(scaled: ScaledMesh):
    await _phase(scaled, "steady")


def _killer(service: str):  # type: ignore[no-untyped-def]
    async def chaos(mesh: ScaledMesh) -> None:
        victim = mesh.replicas[service][0]
        if service == "runs":
            # the replica executing the most unfinished runs
            owners = Counter(mesh.unfinished_at_chaos.values())  # type: ignore[attr-defined]
            busiest = owners.most_common(1)[0][0]
            victim = next(r for r in mesh.runs if r.name == busiest)
        await asyncio.to_thread(mesh.kill, victim)
        if service == "runs":
            # requests recorded up to here were sent before the replica was dead
            mesh.killed_runs_replica = (victim.name, len(mesh.emu.requests))  # type: ignore[attr-defined]

    return chaos


@pytest.mark.parametrize("service", ["runs", "tools", "sessions"])
async def test_kill_9_of_a_replica_mid_load(scaled: ScaledMesh, service: str):
    try:
        await _phase(scaled, f"kill-{service}", _killer(service), allow_suspend=service == "tools")
    finally:
        scaled.killed_runs_replica = None  # type: ignore[attr-defined]
        for victim in scaled.replicas[service]:
            if not victim.alive():
                await asyncio.to_thread(scaled.restart, victim)


async def test_rolling_restart_under_load(scaled: ScaledMesh):
    async def roll(mesh: ScaledMesh) -> None:
        for service in ("tools", "sessions", "gateway", "tasks", "runs"):
            for replica in mesh.replicas[service]:
                status = await asyncio.to_thread(mesh.terminate, replica)
                assert status == 0, f"{replica.name} exited {status} after SIGTERM"
                await asyncio.to_thread(mesh.restart, replica)

    await _phase(scaled, "rolling", roll, feed=True)


async def test_gateway_replicas_kept_one_token_budget(scaled: ScaledMesh):
    accepted = [(t, n) for t, n, ok in scaled.emu.intake if ok]
    assert accepted, "no model request reached the provider"
    windows = [sum(n for t, n in accepted if end - LIMITER_WINDOW_SECONDS < t <= end) for end, _ in accepted]
    assert max(windows) <= BUDGET, f"a window received {max(windows)} input tokens, budget {BUDGET}"
    assert all(ok for _, _, ok in scaled.emu.intake)


def test_every_replica_still_serves(scaled: ScaledMesh):
    for replicas in scaled.replicas.values():
        for replica in replicas:
            wait_serving(replica.address, replica.proc)
