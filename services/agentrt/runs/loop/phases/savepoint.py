"""A turn's save point: its session batch, then the run-log write (004 §2.3a).

`SavePointSteps._save_turn` writes the turn's entries where its request was built
(docs/decisions/0003), with the injected input it consumes and the turn's diagnostics, then
records the save point (run row, run log and events in one fenced transaction) before
anything follows: the fenced write is also what tells a replica that lost its run (a
takeover) to stop before it asks the model again (decision 0050 records why it is not
written beside the next model call). It also honors a queued StopAfterTurn and discloses
deferred tools.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agentrt.core.decide import Decision, DecisionKind
from agentrt.core.stopping import stop_output
from agentrt.runs.convert.model import text_of
from agentrt.runs.convert.run import STOP_KIND
from agentrt.runs.domain import Answers
from agentrt.runs.loop.core import ExecutorCore
from agentrt.runs.loop.persistence import attach_diagnostics, injected_entry, turn_entries, write_batch
from agentrt.runs.loop.phases import disclosure as disclosure_phase
from agentrt.runs.loop.phases import handoff as handoff_phase
from agentrt.runs.loop.phases.stopping import STOPPED_OUTPUT
from agentrt.runs.storage.input_watch import Mark
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb

#: Injection kinds consumed at a save point that continues, and at a final output (004 §2.11b).
AT_SAVE_POINT = ("steer", "next_turn")
AT_FINAL = ("steer", "follow_up")


class SavePointSteps(ExecutorCore):
    """The save point of a turn (see the module docstring)."""

    #: The run's input queue as last read (with what the InputWatch knew then), less what
    #: this executor's save points consumed since; None until read or after a failed save.
    _inbox: tuple[Mark, list[dict[str, Any]]] | None = None

    @property
    def agent(self) -> pb.AgentSpec:
        """The snapshot whose turn it is: the entry agent, or the last handoff's target."""
        return handoff_phase.current_agent(self.r.state, self.r.agent)

    async def _pending_input(self) -> list[dict[str, Any]]:
        """The run's input queue before a batch (decision 0060).

        The queue this executor read, less what its own save points consumed, while the
        process's InputWatch says no input can have been queued since the read; else read.
        """
        watch, run_id = self.deps.store.input_watch, self.r.run_id
        if self._inbox is not None and watch.unchanged(run_id, self._inbox[0]):
            return list(self._inbox[1])
        mark = watch.mark(run_id)
        inbox = await self.deps.store.pending_input(run_id)
        self._inbox = (mark, inbox)
        return inbox

    async def _save_turn(
        self,
        turn: int,
        response: cpb.ModelResponse,
        decision: Decision,
        results: list[cpb.ToolResult],
        consume: tuple[str, ...],
        extra: list[spb.Entry] | None = None,
        on_written: Callable[[int], None] | None = None,
        stoppable: bool = False,
    ) -> bool:
        """Write the turn's batch and reach the save point (004 §2.3a).

        `extra` entries (the runtime's own messages, e.g. a recovery prompt) follow the
        turn's entries and come before the injected input it consumes. `on_written` is
        called with the batch's last session seq once it is written, before the save
        point, so what it defers is recorded with the save point (a handoff's switch); not
        when a StopAfterTurn is honored here, since stopping at a handoff keeps control.
        `stoppable`: the turn would take another turn, so a queued StopAfterTurn is
        honored here: the stop leaves the queue, `stop_requested` is published and the
        stopped run's output (the turn's last message, else its last tool output) is
        kept in the run state (`stopping_phase.STOPPED_OUTPUT`), in the same save.

        Returns True when injected input that extends a finishing run was consumed.
        """
        r = self.r
        inbox = await self._pending_input()
        queued = [i for i in inbox if i.get("kind") in consume]
        stops = [i for i in inbox if i.get("kind") == STOP_KIND] if stoppable else []
        entries = turn_entries(r.run_id, turn, self.agent.name, response, decision, results)
        entries += extra or []
        entries += [injected_entry(r.run_id, turn, self.agent.name, i["text"], i["id"]) for i in queued]
        attach_diagnostics(entries, self._unbatched)
        seq, leaf = self._request_at
        # A finishing turn's batch needs no next turn's tail (queued input that extends the
        # run is read by that turn itself).
        ahead = consume != AT_FINAL
        written = await write_batch(
            self.deps.peers,
            r.tenant,
            r.session_id,
            entries,
            seq,
            request_leaf=leaf or None,
            with_tail=self._context.loaded and ahead,
        )
        self.deps.crash("after_session_write")
        if on_written is not None and not stops:  # stopping at a handoff: control stays (004 §2.3c)
            on_written(written.last_seq)
        self._unbatched = []
        self._wrote(written.stored, written.tail, read_ahead=ahead)
        if written.branched:
            self._diagnose(
                "session_branched",
                f"{len(written.branched)} entr{'y' if len(written.branched) == 1 else 'ies'} another writer "
                "appended during the turn stay on a sibling branch; the turn was written where its request "
                "was built (docs/decisions/0003).",
                foreign_entry_ids=written.branched,
            )
        self._publish(items_persisted=pb.ItemsPersisted(last_seq=written.last_seq, entries=written.count))
        errors = r.consecutive_error_turns
        if results:
            failed = [x.is_error and x.status != cpb.TOOL_RESULT_STATUS_DENIED for x in results]
            errors = errors + 1 if all(failed) else 0
        self._bytes_since += sum(len(x.content.encode()) for x in results)
        if any(x.added_tools for x in results):
            record, disclosed = disclosure_phase.disclose(self.agent, r.state, results)
            for event in disclosed:
                self._publish(tools_disclosed=event)
            if disclosed:
                self._defer_state(**{disclosure_phase.DISCLOSURE: record})
        consumed = written.injected  # what the session holds, not what this attempt meant to write
        if stops:
            self._publish(stop_requested=pb.StopRequested(reason=str(stops[0].get("text", ""))))
            outputs = [x.content for x in results]
            self._defer_state(**{STOPPED_OUTPUT: stop_output(text_of(response.content), outputs)})
        last_seq = written.last_seq
        payload = {"turn": turn, "session_seq": last_seq, "entries": written.count, "injected": consumed}
        changes: dict[str, Any] = {
            "turns": turn,
            "session_last_seq": written.last_seq,
            "consecutive_error_turns": errors,
            "answers": Answers(),
            "pending": [],
        }
        dropped = [*consumed, *(str(i["id"]) for i in stops)]
        known, self._inbox = self._inbox, None  # a save that fails leaves the queue unknown
        await self._save("turn_persisted", payload, **changes, _drop_inputs=dropped)
        if known is not None:
            gone = set(dropped)
            self._inbox = (known[0], [i for i in known[1] if str(i["id"]) not in gone])
        return (
            any(i.get("kind") in ("steer", "follow_up") and i["id"] in consumed for i in queued)
            and decision.kind == DecisionKind.FINAL
        )
