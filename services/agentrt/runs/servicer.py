"""RunService servicer: proto <-> domain and nothing else (see manager.RunManager).

Every method reads the caller's tenant from the call context; errors are MeshErrors the
mesh interceptor maps to a gRPC status with an ErrorInfo reason.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator

import grpc

from agentrt.core.errors import Reason, invalid, missing
from agentrt.core.ids import valid_id
from agentrt.mesh.context import current_tenant
from agentrt.runs.convert.run import run_out
from agentrt.runs.domain import Resume
from agentrt.runs.events.stream import MAX_BATCH_BYTES, batched
from agentrt.runs.manager import RunManager
from agentrt.runs.spec import admission
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import run_service_pb2_grpc as pb_grpc

MAX_PAGE = 1000
DEFAULT_PAGE = 100
#: Longest StopAfterTurn reason, in characters.
MAX_STOP_REASON = 1024


class RunServicer(pb_grpc.RunServiceServicer):
    """RunService over a RunManager."""

    def __init__(self, manager: RunManager) -> None:
        """Serve manager's runs."""
        self.m = manager

    async def RegisterAgent(
        self, request: pb.RegisterAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.RegisterAgentResponse:
        """Store a new version of an agent spec.

        Raises INVALID_ARGUMENT (MISSING_FIELD, INVALID_AGENT, INVALID_JSON, INVALID_SCHEMA,
        INVALID_VALUE, UNKNOWN_AGENT).
        """
        if not request.HasField("agent"):
            raise missing("agent")
        return pb.RegisterAgentResponse(agent=await self.m.register_agent(current_tenant(), request.agent))

    async def GetAgent(
        self, request: pb.GetAgentRequest, context: grpc.aio.ServicerContext
    ) -> pb.GetAgentResponse:
        """Return a registered spec. Raises INVALID_ARGUMENT (MISSING_FIELD), NOT_FOUND/AGENT_NOT_FOUND."""
        return pb.GetAgentResponse(
            agent=await self.m.get_agent(current_tenant(), request.name, request.version)
        )

    async def StartRun(
        self, request: pb.StartRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.StartRunResponse:
        """Record a run and start it; return once it is recorded.

        Raises INVALID_ARGUMENT (MISSING_FIELD, INVALID_AGENT, INVALID_JSON, INVALID_VALUE,
        INVALID_ID, UNKNOWN_TOOL, IDEMPOTENCY_KEY_REUSED; REQUEST_TOO_LARGE for the input or the
        labels, runs/spec/start.py), NOT_FOUND (AGENT_NOT_FOUND, SESSION_NOT_FOUND),
        FAILED_PRECONDITION/SESSION_BUSY, UNAVAILABLE when a peer is down; for the turn
        contract (admission.check_start) INVALID_ARGUMENT/UNKNOWN_AGENT.
        """
        tenant = current_tenant()
        await admission.check_start(request, functools.partial(self.m.store.get_agent, tenant))
        record = await self.m.start_run(tenant, request)
        return pb.StartRunResponse(run_id=record.run_id, session_id=record.session_id)

    async def GetRun(self, request: pb.GetRunRequest, context: grpc.aio.ServicerContext) -> pb.GetRunResponse:
        """Return a run. Raises INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID), NOT_FOUND/RUN_NOT_FOUND."""
        return pb.GetRunResponse(run=run_out(await self.m.get_run(current_tenant(), request.run_id)))

    async def ListRuns(
        self, request: pb.ListRunsRequest, context: grpc.aio.ServicerContext
    ) -> pb.ListRunsResponse:
        """List runs newest first. Raises INVALID_ARGUMENT (INVALID_VALUE page, INVALID_ID session)."""
        if request.page_size < 0 or request.page_size > MAX_PAGE:
            raise invalid(Reason.INVALID_VALUE, f"page_size must be 0..{MAX_PAGE}", field="page_size")
        if request.page_token and not valid_id(request.page_token):
            raise invalid(
                Reason.INVALID_VALUE, "page_token is not one this service issued", field="page_token"
            )
        if request.session_id and not valid_id(request.session_id):
            raise invalid(Reason.INVALID_ID, "session_id is malformed", field="session_id")
        size = request.page_size or DEFAULT_PAGE
        runs = await self.m.store.list_runs(current_tenant(), request.session_id, size, request.page_token)
        token = runs[-1].run_id if len(runs) == size else ""
        return pb.ListRunsResponse(runs=[run_out(r) for r in runs], next_page_token=token)

    async def StreamRunEvents(
        self, request: pb.StreamRunEventsRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.StreamRunEventsResponse]:
        """Stream events after after_seq; a run's stream ends after stream_end.

        With batch_events, the events at hand together share a message (`event`, then
        `more_events`, at most MAX_BATCH_BYTES of them); else one event per message.

        Raises INVALID_ARGUMENT (MISSING_FIELD, INVALID_VALUE, INVALID_ID), NOT_FOUND
        (RUN_NOT_FOUND, SESSION_NOT_FOUND).
        """
        batches = await self.m.events(current_tenant(), request)
        async for batch in batches:
            if not request.batch_events:
                for event in batch:
                    yield pb.StreamRunEventsResponse(event=event)
                continue
            for part in batched(batch, MAX_BATCH_BYTES):
                yield pb.StreamRunEventsResponse(event=part[0], more_events=part[1:])

    async def ResumeRun(
        self, request: pb.ResumeRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.ResumeRunResponse:
        """Answer a suspended run's calls; continue it once all are answered.

        Raises INVALID_ARGUMENT (MISSING_FIELD, INVALID_VALUE), NOT_FOUND/RUN_NOT_FOUND,
        FAILED_PRECONDITION (RUN_NOT_SUSPENDED, RUN_FINISHED); INVALID_VALUE for a result's
        runtime-only `child_run_id` or malformed `added_tools` (admission).
        """
        admission.check_resume_results(request)
        resume = Resume.of(request)
        return pb.ResumeRunResponse(run=run_out(await self.m.resume(current_tenant(), resume)))

    async def CancelRun(
        self, request: pb.CancelRunRequest, context: grpc.aio.ServicerContext
    ) -> pb.CancelRunResponse:
        """Cancel a run (terminal, not an error).

        Raises INVALID_ARGUMENT, NOT_FOUND/RUN_NOT_FOUND, FAILED_PRECONDITION/RUN_FINISHED.
        """
        return pb.CancelRunResponse(
            run=run_out(await self.m.cancel(current_tenant(), request.run_id, request.reason))
        )

    async def InjectInput(
        self, request: pb.InjectInputRequest, context: grpc.aio.ServicerContext
    ) -> pb.InjectInputResponse:
        """Queue input into a live run.

        Raises INVALID_ARGUMENT (MISSING_FIELD, INVALID_VALUE), NOT_FOUND/RUN_NOT_FOUND,
        FAILED_PRECONDITION/RUN_FINISHED.
        """
        return pb.InjectInputResponse(position=await self.m.inject(current_tenant(), request))

    async def StopAfterTurn(
        self, request: pb.StopAfterTurnRequest, context: grpc.aio.ServicerContext
    ) -> pb.StopAfterTurnResponse:
        """Ask a run to finish at its next save point (004 §2.3c; manager.stop_after_turn).

        Raises INVALID_ARGUMENT (MISSING_FIELD, INVALID_ID, INVALID_VALUE for a reason over
        1,024 characters), NOT_FOUND/RUN_NOT_FOUND, FAILED_PRECONDITION/RUN_FINISHED.
        """
        await self.m.get_run(current_tenant(), request.run_id)
        if len(request.reason) > MAX_STOP_REASON:
            raise invalid(
                Reason.INVALID_VALUE, f"reason is longer than {MAX_STOP_REASON} characters", field="reason"
            )
        record = await self.m.stop_after_turn(current_tenant(), request.run_id, request.reason)
        return pb.StopAfterTurnResponse(run=run_out(record))
