"""Compaction by the run: a summary through the gateway, a checkpoint appended (004 §2.5f, §2.5g).

`Compactor` is the I/O half of a pass; the plan is `agentrt.core.compaction`'s:
1. `due()` asks the policy's triggers (the next request's estimated input against the
   token threshold, the view's step count against the turn trigger) at the three points
   the run consults it: before its first model call, at each save point once the turn is
   persisted, and once the final output is persisted.
2. `summarize()` plans the fold over the context view and asks the summary model (the
   policy's, else the agent's) for a summary of the folded entries, quoted as evidence;
   the request is bounded so it fits the window itself.
3. `checkpoint()` appends the checkpoint entry (kind "compaction": the folded entry ids,
   the summary, the summary response's usage) guarded by the seq the view was read at.
   A checkpoint is appended, never a rewrite: the folded entries stay in the log, and the
   session's context view leaves them out from then on, for this run and the next.
Nothing here fails the run: a pass that cannot summarize or loses its guard returns why
(`compaction_failed` / `compaction_abandoned`), and the context it meant to shrink is
still valid. The loop logs the summary before the checkpoint is written, so a takeover
appends the recorded summary rather than asking for it again (never billed twice).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from agentrt.core import compaction as plan_of
from agentrt.core.errors import MeshError, Status
from agentrt.mesh import telemetry
from agentrt.runs.convert.history import evidence_of, units_of
from agentrt.runs.convert.model import text_of
from agentrt.runs.loop.phases.model import build_request
from agentrt.runs.peers.client import Peers
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import gateway_service_pb2 as gpb
from agentrt.v1 import run_service_pb2 as pb
from agentrt.v1 import session_service_pb2 as spb

#: Output cap of a summary when the policy sets none, in tokens.
DEFAULT_SUMMARY_TOKENS = 1024
#: Evidence budget without a known context window, in bytes.
DEFAULT_EVIDENCE_BYTES = 256 * 1024
#: The points a pass is consulted at.
BEFORE_RUN, SAVE_POINT, AFTER_RUN, OVERFLOW = "before_run", "save_point", "after_run", "overflow"


@dataclass(frozen=True)
class Summarized:
    """A summary ready to be checkpointed (what the run log records before the append).

    Attributes:
        turn: the turn it belongs to (0 before the first).
        point: where it was consulted (BEFORE_RUN, SAVE_POINT, AFTER_RUN, OVERFLOW).
        summary: the summary text.
        folded: entry ids it folds, in view order.
        folded_steps: model steps among them.
        view_seq: the session seq the view was read at (the append's guard).
        before_bytes: the view's weight before the pass.
        after_bytes: its weight after it (the summary standing in for the folded entries).
        response_id: the summary response's id.
        usage: its usage.
    """

    turn: int
    point: str
    summary: str
    folded: tuple[str, ...]
    folded_steps: int
    view_seq: int
    before_bytes: int
    after_bytes: int
    response_id: str
    usage: cpb.Usage

    def payload(self) -> dict[str, object]:
        """The run log's record of it (JSON)."""
        return {
            "turn": self.turn,
            "point": self.point,
            "summary": self.summary,
            "folded": list(self.folded),
            "folded_steps": self.folded_steps,
            "view_seq": self.view_seq,
            "before_bytes": self.before_bytes,
            "after_bytes": self.after_bytes,
            "response_id": self.response_id,
            "usage": json.loads(json.dumps(_usage_dict(self.usage))),
        }

    @classmethod
    def from_payload(cls, p: dict[str, object]) -> Summarized:
        """Read the run log's record back."""
        usage = p.get("usage") or {}
        assert isinstance(usage, dict)
        return cls(
            turn=int(p["turn"]),  # type: ignore[call-overload]
            point=str(p["point"]),
            summary=str(p["summary"]),
            folded=tuple(str(x) for x in p["folded"]),  # type: ignore[attr-defined]
            folded_steps=int(p["folded_steps"]),  # type: ignore[call-overload]
            view_seq=int(p["view_seq"]),  # type: ignore[call-overload]
            before_bytes=int(p["before_bytes"]),  # type: ignore[call-overload]
            after_bytes=int(p["after_bytes"]),  # type: ignore[call-overload]
            response_id=str(p.get("response_id", "")),
            usage=cpb.Usage(**{k: int(v) for k, v in usage.items()}),
        )


def _usage_dict(u: cpb.Usage) -> dict[str, int]:
    return {
        "input_tokens": u.input_tokens,
        "output_tokens": u.output_tokens,
        "cached_input_tokens": u.cached_input_tokens,
        "reasoning_tokens": u.reasoning_tokens,
        "requests": u.requests or 1,
    }


class CompactionSkipped(Exception):
    """A pass that did not produce a summary; `code` is the diagnostic to record, "" for none."""

    def __init__(self, code: str, message: str) -> None:
        """Carry the diagnostic code ("compaction_failed", "" for nothing to fold) and why."""
        super().__init__(message)
        self.code = code
        self.message = message


class Compactor:
    """The run's compaction (see the module docstring); one per executor."""

    def __init__(self, peers: Peers, snapshot: pb.AgentSpec, tenant: str, run_id: str) -> None:
        """Compact for one run whose snapshot carries the policy (or none)."""
        self.peers = peers
        self.snap = snapshot
        self.tenant = tenant
        self.run_id = run_id
        self.policy = snapshot.compaction
        self.enabled = snapshot.HasField("compaction")

    @property
    def threshold_tokens(self) -> int:
        """The token trigger (0 = off)."""
        return plan_of.trigger_tokens(self.policy.context_window_tokens, self.policy.trigger_input_tokens)

    async def estimate(self, view: list[spb.Entry], last: cpb.Usage | None, bytes_since: int) -> int:
        """Estimate the next request's input tokens (CountTokens with `count_tokens`).

        The larger of the usage estimate (the last response's input + output, plus what was
        written since) and a quarter of the rendered request's bytes, so a session
        continued by a new run (no usage yet) is estimated too.
        """
        request = build_request(self.snap, self.run_id, self.tenant, view) if view else None
        if self.policy.count_tokens and request is not None:
            try:
                return await self.peers.count_tokens(self.tenant, request)
            except MeshError:
                pass  # no exact count from this provider: estimate
        by_usage = plan_of.estimate_tokens(last.input_tokens, last.output_tokens, bytes_since) if last else 0
        by_bytes = (request.ByteSize() + 3) // plan_of.BYTES_PER_TOKEN if request is not None else 0
        return max(by_usage, by_bytes)

    def due(self, view: list[spb.Entry], estimate_tokens: int) -> tuple[bool, str]:
        """Whether the policy's triggers ask for a pass now: (due, "tokens" | "turns" | "")."""
        if not self.enabled:
            return False, ""
        steps = plan_of.step_groups(units_of(view))
        return plan_of.should_compact(
            estimate_tokens, self.threshold_tokens, steps, self.policy.trigger_turns
        )

    async def summarize(self, view: list[spb.Entry], view_seq: int, turn: int, point: str) -> Summarized:
        """Plan a pass over the view and have the summary written (one Generate).

        The pass is one compaction span (mesh/telemetry), the parent of its Generate call:
        the entries before and after, the point, and a gave-up pass's code as `error.type`.

        Raises:
            CompactionSkipped, as `_summarize`.
        """
        with telemetry.compaction_span(
            "", entries_before=len(view)
        ) as span:  # the run's span names the session
            span.set("agentrt.compaction.point", point)
            try:
                done = await self._summarize(view, view_seq, turn, point)
            except CompactionSkipped as skip:
                span.fail(skip.code or "nothing_to_fold", skip.message)
                raise
            span.set_many(
                {
                    "agentrt.compaction.entries_folded": len(done.folded),
                    "agentrt.compaction.before_bytes": done.before_bytes,
                    "agentrt.compaction.after_bytes": done.after_bytes,
                    "gen_ai.response.id": done.response_id or None,
                }
            )
            return done

    async def _summarize(self, view: list[spb.Entry], view_seq: int, turn: int, point: str) -> Summarized:
        """`summarize`'s pass.

        Raises:
            CompactionSkipped: nothing to fold (code ""), or the summary model failed or
                answered nothing (code "compaction_failed").
        """
        units = units_of(view)
        plan = plan_of.plan(units, self.policy.keep_turns)
        if plan is None:
            raise CompactionSkipped("", "nothing older than the kept turns to fold")
        folded = set(plan.folded)
        previous = [e.summary for e in view if e.kind == "compaction" and e.entry_id in folded and e.summary]
        records = evidence_of([e for e in view if e.entry_id in folded and e.kind != "compaction"])
        max_tokens = self.policy.summary_max_output_tokens or DEFAULT_SUMMARY_TOKENS
        budget = DEFAULT_EVIDENCE_BYTES
        if self.policy.context_window_tokens:
            room = self.policy.context_window_tokens - max_tokens
            budget = int(room * plan_of.BYTES_PER_TOKEN * 0.8) - len(plan_of.SUMMARY_INSTRUCTIONS)
        text = plan_of.evidence(records, previous, budget)
        model = self.policy.summary_model if self.policy.summary_model.provider else self.snap.model
        request = gpb.ModelRequest(
            model=model,
            system=plan_of.SUMMARY_INSTRUCTIONS,
            messages=[
                cpb.Message(role=cpb.ROLE_USER, content=[cpb.ContentBlock(text=cpb.TextBlock(text=text))])
            ],
            settings=cpb.ModelSettings(max_output_tokens=max_tokens),
            tenant=self.tenant,
            run_id=self.run_id,
            # the same pass on another replica (a takeover) is answered from the gateway's journal
            idempotency_key=f"{self.run_id}/compaction-{turn}-{point}/view-{view_seq}",
        )
        try:
            answer = await self.peers.generate_once(self.tenant, request)
        except MeshError as err:
            raise CompactionSkipped("compaction_failed", f"the summary model failed: {err.message}") from err
        summary = text_of(answer.response.content).strip()
        if not summary:
            raise CompactionSkipped("compaction_failed", "the summary model answered no text")
        before = plan_of.weight(units)
        after = before - plan.folded_bytes + len(summary.encode())
        usage = cpb.Usage()
        usage.CopyFrom(answer.response.usage)
        usage.requests = usage.requests or 1
        return Summarized(
            turn, point, summary, plan.folded, plan.folded_steps, view_seq, before, after,
            answer.response.response_id, usage,
        )  # fmt: skip

    def checkpoint_entry(self, s: Summarized) -> spb.Entry:
        """Return the checkpoint entry of a summary (its batch name makes the append idempotent)."""
        extra = {"batch": f"compaction:{s.turn}:{s.point}", "point": s.point, "folded_steps": s.folded_steps}
        entry = spb.Entry(
            kind="compaction",
            folded_entry_ids=list(s.folded),
            summary=s.summary,
            run_id=self.run_id,
            turn=max(s.turn, 1),
            response_id=s.response_id,
            display=spb.Display(
                title="compaction",
                summary=f"{s.folded_steps} earlier turn(s) summarized",
                extra_json=json.dumps(extra),
            ),
        )
        entry.usage.CopyFrom(s.usage)
        return entry


def abandoned(err: MeshError) -> bool:
    """True when a checkpoint append lost its guard for good (the pass is abandoned, 004 §2.5f)."""
    return err.status == Status.ABORTED
