"""The run a request comes from: a task tool acting for a model (004 §2.13).

A task tool (spawn_task, task_status, task_retry, task_stop: the tool service's) knows the
run it serves and nothing else. This module turns that run into what a request needs:

- a spawn that names a parent run but no parent session gets the session that run
  executes in, and one that names no agent gets the agent that run executes (its current
  agent, after a handoff), registered name and version: a task runs as the agent that
  asked (the seed's Task.Inherit). A run of an inline agent has no registered spec to
  inherit, so such a spawn must name an agent (INVALID_ARGUMENT/MISSING_FIELD says so);
- a get, retry or stop that names a caller run is scoped to that run's session: a task
  serving another session answers NOT_FOUND/TASK_NOT_FOUND exactly as an unknown id does,
  so a model can neither read nor steer a task it does not own.

A run's session and agent never change, so the answers are cached (bounded, per tenant).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from agentrt.core.errors import MeshError, Reason, invalid, not_found
from agentrt.core.ids import valid_id
from agentrt.tasks.peers import Peers
from agentrt.v1 import task_service_pb2 as pb

#: Runs remembered (session and agent), least recently used first out.
CACHE_SIZE = 4096


@dataclass(frozen=True)
class CallerRun:
    """What a task request needs of the run it comes from.

    Attributes:
        session_id: the session the run executes in.
        agent_name: the registered agent whose turn it is ("" when inline).
        agent_version: its version (0 when the agent is inline).
    """

    session_id: str
    agent_name: str
    agent_version: int


def _run_id(value: str, name: str) -> str:
    if not valid_id(value):
        raise invalid(Reason.INVALID_ID, f"{name} is malformed", field=name)
    return value


class Callers:
    """Resolves and scopes requests by the run they come from (see the module docstring)."""

    def __init__(self, peers: Peers) -> None:
        """Ask RunService (GetRun) through peers."""
        self.peers = peers
        self._cache: OrderedDict[tuple[str, str], CallerRun] = OrderedDict()

    async def run(self, tenant: str, run_id: str) -> CallerRun:
        """Return the run's session and agent.

        Raises:
            MeshError: NOT_FOUND/RUN_NOT_FOUND; UNAVAILABLE when RunService cannot be reached.
        """
        key = (tenant, run_id)
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        run = await self.peers.get_run(tenant, run_id)
        name = run.current_agent_name or run.agent_name
        version = run.current_agent_version if run.current_agent_name else run.agent_version
        found = CallerRun(run.session_id, name if version > 0 else "", version)
        self._cache[key] = found
        if len(self._cache) > CACHE_SIZE:
            self._cache.popitem(last=False)
        return found

    async def resolve_spawn(self, tenant: str, req: pb.SpawnTaskRequest) -> pb.SpawnTaskRequest:
        """Fill a spawn's parent session and agent from its parent run when it leaves them out.

        Returns:
            req itself when it names both (or no parent run); else a copy with
            parent_session_id and agent_name/agent_version set from the run.

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_ID (a malformed parent_run_id),
                INVALID_ARGUMENT/MISSING_FIELD (the run's agent is inline and none is named);
                NOT_FOUND/RUN_NOT_FOUND; UNAVAILABLE.
        """
        needs_agent = not req.agent_name and not req.HasField("agent")
        if not req.parent_run_id or (req.parent_session_id and not needs_agent):
            return req
        run = await self.run(tenant, _run_id(req.parent_run_id, "parent_run_id"))
        out = pb.SpawnTaskRequest()
        out.CopyFrom(req)
        if not out.parent_session_id:
            out.parent_session_id = run.session_id
        if needs_agent:
            if not run.agent_name:
                raise invalid(
                    Reason.MISSING_FIELD,
                    "the parent run's agent is inline, so a task cannot inherit it: name a registered "
                    "agent (agent_name) or give one inline (agent)",
                    field="agent_name",
                )
            out.agent_name, out.agent_version = run.agent_name, run.agent_version
        return out

    async def scope(self, tenant: str, task_parent: str, task_id: str, caller_run_id: str) -> None:
        """Refuse a caller run whose session is not the task's parent.

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_ID (a malformed caller_run_id);
                NOT_FOUND/TASK_NOT_FOUND (the task serves another session, or the caller run
                is unknown); UNAVAILABLE.
        """
        if not caller_run_id:
            return
        try:
            run = await self.run(tenant, _run_id(caller_run_id, "caller_run_id"))
        except MeshError as err:
            if err.reason != Reason.RUN_NOT_FOUND:
                raise
            run = CallerRun("", "", 0)
        if run.session_id != task_parent:
            raise not_found(Reason.TASK_NOT_FOUND, f"task {task_id!r} not found")
