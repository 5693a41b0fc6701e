"""Agent-tool calls in a tool phase: their child runs started, followed, waited on (004 §2.8, §2.2 step 6).

The executor's half of agents as tools (the package docstring, runs/loop/phases/child/, has
the whole picture; the records both halves share are records.py): `start` finds or creates
and links the child run of every agent-tool call that runs, `ChildCalls.run` follows one
inside the batch until it ends or suspends, and `suspend` pauses the parent on its
suspended children.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agentrt.core import agent_tools
from agentrt.core.errors import MeshError, Status
from agentrt.core.ids import new_id
from agentrt.runs.domain import RunRecord, StoredEvent
from agentrt.runs.events.build import child_run_linked, run_started_events
from agentrt.runs.events.hub import run_topic
from agentrt.runs.events.stream import follow
from agentrt.runs.lifecycle import sandboxes
from agentrt.runs.loop.phases.batch import Abandoned, BatchStop, ProgressRelay
from agentrt.runs.loop.phases.child.records import (
    CHILD_DEPTH,
    CHILD_PENDING,
    CHILD_RUN_IDS,
    PARENT_CALL_ID,
    PARENT_RUN_ID,
    annotated,
    child_key,
    finished_result,
)
from agentrt.runs.loop.phases.tools import Planned, runtime_result
from agentrt.runs.peers.sessions import SESSION_GENERATION
from agentrt.runs.spec.agents import limits_of, snapshot, validate_agent
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import tool_service_pb2 as tpb

#: How deep child runs may nest: a call at this depth gets an error result, no child starts.
#: Without it an agent that calls itself (or two that call each other) nests without end.
MAX_CHILD_DEPTH = 8
#: Longest wait before a follower of a child re-reads storage, seconds (another replica's child).
POLL_S = 0.5
#: Most characters of a child's tool arguments shown in a progress line.
ARGS_SHOWN = 200
#: The progress stream of a child's activity (ToolProgressed.stream).
STREAM = "stdout"
#: How long a canceled child may take to record its end before the parent answers the call, seconds.
CANCEL_WAIT_S = 10.0


class ChildHost(Protocol):
    """What the manager does for the executor: run a child here, cancel one anywhere."""

    def spawn_child(self, record: RunRecord, stored: list[StoredEvent]) -> None:
        """Start executing a freshly inserted child run (its lease is the record's)."""

    async def cancel_child(self, tenant: str, run_id: str, reason: str) -> None:
        """Cancel a child run (no error when it has ended already)."""


@dataclass
class _Child:
    call_id: str
    tool: pb.AgentTool
    run_id: str = ""
    fresh: bool = False
    answer: cpb.ToolResult | None = None
    #: A new child not yet executing: spawned when its call runs (in the call's span).
    spawn: tuple[RunRecord, list[StoredEvent]] | None = None


def _error(p: Planned, text: str) -> cpb.ToolResult:
    return runtime_result(p.call, text, cpb.TOOL_RESULT_STATUS_ERROR)


class ChildCalls:
    """One tool phase's agent-tool calls (see the module docstring); built by `start`."""

    def __init__(self, ex: Any, children: dict[str, _Child]) -> None:
        """Hold the executor (its deps and record) and the calls' children by call id."""
        self.ex = ex
        self.children = children
        #: Children that suspended during the batch, by call id, in call order.
        self.suspended: dict[str, RunRecord] = {}

    def handles(self, call_id: str) -> bool:
        """True when the call is an agent tool's (this object runs it, not the tool service)."""
        return call_id in self.children

    def withholds(self, call_id: str) -> bool:
        """True when the call's child suspended: its output is withheld (004 §2.2 step 6)."""
        return call_id in self.suspended

    def pending(self) -> list[pb.PendingCall]:
        """The suspended children's pending calls, in call order, as the parent shows them."""
        return [q for child in self.suspended.values() for q in annotated(child)]

    def pending_state(self) -> dict[str, list[str]]:
        """CHILD_PENDING of the parent's state for this suspension."""
        return {c.run_id: [p.call.call_id for p in c.pending] for c in self.suspended.values()}

    async def run(self, p: Planned, stop: BatchStop, relay: ProgressRelay | None) -> cpb.ToolResult:
        """Answer one agent-tool call: the child's ending, or a placeholder when it suspended.

        Raises:
            Abandoned: the batch was abandoned; the child runs on.
        """
        child = self.children[p.call.call_id]
        if child.answer is not None:
            return child.answer
        deps = self.ex.deps
        if child.spawn is not None:
            # Spawned here, in the call's span: the child's spans join the parent's trace under
            # the function span that started it (004 §2.8 Trace), and the batch's concurrency
            # cap holds for children too. A child never reached (a kill first) is taken over
            # when its lease expires, and canceled with its parent.
            deps.children.spawn_child(*child.spawn)
            child.spawn = None
        work = asyncio.ensure_future(self._until_paused(child, relay))
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if not work.done():
            work.cancel()
            if stop.mode != "kill":
                raise Abandoned()
            await deps.children.cancel_child(self.ex.r.tenant, child.run_id, stop.why)
            record = await self._ended(child.run_id)
        else:
            record = work.result()
        if record is None or not record.finished:
            if record is not None and record.status == cpb.RUN_STATUS_SUSPENDED and stop.mode != "kill":
                self.suspended[p.call.call_id] = record
                return _error(p, "The agent's run waits for an answer.")  # withheld, never stored
            return runtime_result(
                p.call,
                f"The agent's run did not end in time ({stop.why or 'unknown'}).",
                cpb.TOOL_RESULT_STATUS_INTERRUPTED,
            )
        return finished_result(p.call.call_id, p.call.name, record)

    async def _ended(self, run_id: str) -> RunRecord | None:
        """Read the child until it has ended (a cancel was sent), at most CANCEL_WAIT_S."""
        store = self.ex.deps.store
        deadline = time.monotonic() + CANCEL_WAIT_S
        while True:
            record = await store.get_run(run_id)
            if record is None or record.finished or time.monotonic() >= deadline:
                return record
            await asyncio.sleep(0.1)

    async def _until_paused(self, child: _Child, relay: ProgressRelay | None) -> RunRecord | None:
        """Return the child's record once it has ended or suspended; relay its progress meanwhile."""
        deps = self.ex.deps
        store = deps.store
        after = 0 if child.fresh else await store.last_stored_seq(child.run_id)
        record = await store.get_run(child.run_id)
        if record is None or record.finished or record.status == cpb.RUN_STATUS_SUSPENDED:
            return record

        async def read(a: int, upto: int | None) -> list[StoredEvent]:
            return list(await store.read_events(child.run_id, a, upto))

        async def head() -> int:
            return int(await store.run_head(child.run_id))

        async def ended() -> bool:
            again = await store.get_run(child.run_id)
            return again is None or again.finished or again.status == cpb.RUN_STATUS_SUSPENDED

        name = child.tool.agent_name
        async for event in follow(
            deps.hub, run_topic(child.run_id), read, after,
            poll_seconds=POLL_S, head=head, ended=ended,
        ):  # fmt: skip
            kind = event.WhichOneof("payload")
            if relay is not None and (line := _progress_line(name, event)):
                relay(tpb.ToolProgress(stream=STREAM, text=line))
            if kind in ("run_suspended", "run_completed", "stream_end", "gap"):
                record = await store.get_run(child.run_id)
                if record is None or record.finished or record.status == cpb.RUN_STATUS_SUSPENDED:
                    return record
        return await store.get_run(child.run_id)


def _progress_line(agent: str, event: pb.RunEvent) -> str:
    """Return the parent's progress text for one of the child's events ("" for none)."""
    kind = event.WhichOneof("payload")
    if kind == "tool_called":
        call = event.tool_called.call
        args = call.arguments or call.invalid_arguments
        shown = args if len(args) <= ARGS_SHOWN else args[:ARGS_SHOWN] + "..."
        return f"[{agent}] -> {call.name} {shown}\n"
    if kind == "tool_progressed":
        return event.tool_progressed.text
    if kind == "tool_returned":
        r = event.tool_returned.result
        return f"[{agent}] <- {r.name} {cpb.ToolResultStatus.Name(r.status).lower()[19:]}\n"
    if kind == "run_suspended":
        names = ", ".join(p.call.name for p in event.run_suspended.pending_calls)
        return f"[{agent}] waits for an answer: {names}\n"
    return ""


async def start(ex: Any, planned: Sequence[Planned]) -> ChildCalls | None:
    """Find or create the child run of every agent-tool call that runs; link new ones.

    Args:
        ex: the parent's executor (its deps, record, `_publish`, `_defer_state`, `_save`).
        planned: the tool phase's plan, in call order.

    Returns:
        The batch's ChildCalls, or None when no agent-tool call runs. A call whose agent
        cannot run (no longer registered, a snapshot that cannot be built, arguments without
        a usable input) is answered with an error result for the model.

    Raises:
        LeaseLost: the parent's link could not be written (another replica owns it).
    """
    tools = {t.name: t for t in ex.agent.tools if t.agent_name}
    children = {
        p.call.call_id: _Child(p.call.call_id, tools[p.call.name])
        for p in planned
        if p.runs and p.call.name in tools
    }
    if not children:
        return None
    r = ex.r
    linked = list(r.state.get(CHILD_RUN_IDS, []))
    links = []
    for p in planned:
        child = children.get(p.call.call_id)
        if child is None:
            continue
        try:
            text = agent_tools.child_input(p.call.arguments)
        except agent_tools.ChildInputError as bad:
            child.answer = _error(p, f"The agent tool {p.call.name} needs valid input: {bad}")
            continue
        found = await ex.deps.store.find_idempotent(r.tenant, child_key(r.run_id, p.call.call_id))
        if found is None:
            made = await _create(ex, p, child.tool, text)
            if isinstance(made, cpb.ToolResult):
                child.answer = made
                continue
            found, stored = made
            if stored:
                child.spawn, child.fresh = (found, stored), True
        child.run_id = found.run_id
        if found.run_id not in linked:
            linked.append(found.run_id)
            links.append(child_run_linked(p.call.call_id, found))
    if links:
        for link in links:
            ex._publish(child_run_linked=link)
        ex._defer_state(**{CHILD_RUN_IDS: linked})
        await ex._save("children_linked", {"turn": ex.turn, "children": [x.child_run_id for x in links]})
    return ChildCalls(ex, children)


async def _create(
    ex: Any, p: Planned, tool: pb.AgentTool, text: str
) -> tuple[RunRecord, list[StoredEvent]] | cpb.ToolResult:
    """Create the child run of a call (not yet spawned); an error result when it cannot run."""
    r, deps = ex.r, ex.deps
    depth = int(r.state.get(CHILD_DEPTH, 1 if r.state.get(PARENT_RUN_ID) else 0)) + 1
    if depth > MAX_CHILD_DEPTH:
        return _error(
            p,
            f"The agent tool {p.call.name} cannot run: agent runs nest at most {MAX_CHILD_DEPTH} deep, "
            "and this run is that deep already.",
        )
    which = f"version {tool.agent_version} of " if tool.agent_version else ""
    spec = await deps.store.get_agent(r.tenant, tool.agent_name, tool.agent_version)
    if spec is None:
        return _error(
            p, f"The agent tool {p.call.name} cannot run: {which}agent {tool.agent_name!r} is not registered."
        )
    model = ex.agent.model
    try:
        validate_agent(spec, require_name=True)
        snap = snapshot(spec, f"{model.provider}:{model.model}", await deps.peers.catalog(r.tenant))
    except MeshError as err:
        if err.status not in (Status.INVALID_ARGUMENT, Status.UNIMPLEMENTED):
            raise
        return _error(p, f"The agent tool {p.call.name} cannot run: {err.message}")
    title = f"{snap.name} for run {r.run_id}"
    hidden = await deps.peers.create_hidden_session(r.tenant, r.session_id, title=title)
    session_id = hidden.session_id
    now = time.time()
    budget = limits_of(snap).time_budget_s
    run_id = new_id("run")
    # The child's own agent may name a sandbox (created at its first batch, released at its
    # end); the parent's sandbox is not shared: the child's end would release it.
    state: dict[str, Any] = {
        PARENT_RUN_ID: r.run_id,
        PARENT_CALL_ID: p.call.call_id,
        CHILD_DEPTH: depth,
        SESSION_GENERATION: hidden.generation,  # held by generation, as every run (decision 0058)
    }
    state.update(sandboxes.initial_state(run_id, snap.sandbox if snap.HasField("sandbox") else None))
    record = RunRecord(
        run_id=run_id, tenant=r.tenant, session_id=session_id, agent_name=snap.name,
        agent_version=snap.version, agent=snap, input=text, workspace=r.workspace,
        idempotency_key=child_key(r.run_id, p.call.call_id), lease_owner=deps.owner,
        lease_expires_s=now + deps.lease_seconds, fencing_token=1, create_time_s=now, update_time_s=now,
        deadline_s=now + budget if budget else 0.0,
        state=state,
    )  # fmt: skip
    stored_record, stored = await deps.store.insert_run(record, run_started_events(record))
    return stored_record, stored


async def suspend(ex: Any, turn: int, calls: ChildCalls, also: Sequence[pb.PendingCall] = ()) -> None:
    """Suspend the parent on its suspended children (004 §2.2 step 6): their calls are its pending."""
    ex._defer_state(**{CHILD_PENDING: calls.pending_state()})
    await ex._suspend(turn, [*also, *calls.pending()], pb.SUSPENSION_REASON_PENDING_CALLS)
