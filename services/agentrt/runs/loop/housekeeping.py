"""Housekeeping of a run: compaction at its points and context-overflow recovery.

004 §2.5f: compaction is consulted before the first model call, at each save point once
the turn is persisted, and once the final output is persisted; a pass never fails the
run (a `compaction_failed` / `compaction_abandoned` diagnostic says why it gave up). Its
summary is logged before its checkpoint is appended, so a replica that takes over appends
the logged summary rather than requesting it again (`_finish_pending_checkpoint`).
004 §2.5g: an overflow compacts (forced) and retries the same turn, within the run's
`max_overflow_retries` counted across the run, only when the pass made the context
strictly lighter; the retry spends no turn.
"""

from __future__ import annotations

from typing import Any

from agentrt.core.errors import MeshError
from agentrt.runs.convert.model import display_extra
from agentrt.runs.loop.compaction import OVERFLOW, CompactionSkipped, Summarized, abandoned
from agentrt.runs.loop.core import ExecutorCore
from agentrt.runs.loop.failures import ContextOverflow
from agentrt.runs.loop.phases import model as turnmod
from agentrt.runs.spec.agents import Limits
from agentrt.v1 import session_service_pb2 as spb


class Housekeeping(ExecutorCore):
    """Compaction points and overflow recovery (see the module docstring)."""

    async def _recover_overflow(
        self, turn: int, limits: Limits, exc: ContextOverflow, view: list[spb.Entry]
    ) -> bool:
        """Compact and let the turn retry, when the budget and a shrinking pass allow (004 §2.5g)."""
        r = self.r
        if exc.usage.ByteSize():
            self._deferred_changes["usage"] = r.usage = turnmod.add_usage(r.usage, exc.usage)
        if r.overflow_retries >= limits.max_overflow_retries:
            return False
        done = await self._compact(OVERFLOW, turn, view=view)
        if done is None or done.after_bytes >= done.before_bytes:
            return False  # a pass that does not make the context strictly smaller buys no retry
        retries = r.overflow_retries + 1
        self._diagnose(
            "context_overflow",
            "The request did not fit the model's context; the run compacted the session and "
            f"retried the turn ({exc.message}).",
            retries=retries,
            before_bytes=done.before_bytes,
            after_bytes=done.after_bytes,
        )
        self._defer_state(overflow_retries=retries)
        await self._save("overflow_recovered", {"turn": turn, "retries": retries})
        return True

    async def _compact(
        self, point: str, turn: int, *, view: list[spb.Entry] | None = None
    ) -> Summarized | None:
        """Consult compaction at a point; a pass never fails the run (004 §2.5f).

        Returns:
            The checkpointed summary, or None (not due, nothing to fold, failed, abandoned).
        """
        forced = point == OVERFLOW
        if not forced and not self.compactor.enabled:
            return None
        try:
            view = view if view is not None else await self._interruptible(self._read_context())
            if not forced:
                estimate = await self._interruptible(
                    self.compactor.estimate(view, self._last_usage, self._bytes_since)
                )
                due, _ = self.compactor.due(view, estimate)
                if not due:
                    return None
            summary = await self._interruptible(
                self.compactor.summarize(view, self._context.last_seq, turn, point)
            )
        except CompactionSkipped as skip:
            if skip.code:
                self._diagnose(skip.code, f"A compaction pass gave up: {skip.message}.", point=point)
            return None
        except MeshError as err:
            self._diagnose("compaction_failed", f"A compaction pass gave up: {err.message}.", point=point)
            return None
        # Recorded before the checkpoint is written: a takeover appends it, never asks again.
        await self._save(
            "compaction_summarized", summary.payload(), usage=turnmod.add_usage(self.r.usage, summary.usage)
        )
        self.deps.crash("after_compaction_summary")
        return await self._checkpoint(summary)

    async def _checkpoint(self, s: Summarized) -> Summarized | None:
        r = self.r
        entry = self.compactor.checkpoint_entry(s)
        batch = display_extra(entry).get("batch")
        try:
            stored = await self.deps.peers.append(r.tenant, r.session_id, [entry], s.view_seq)
            seq = stored[-1].seq
        except MeshError as err:
            if not abandoned(err):
                self._diagnose(
                    "compaction_failed", f"The compaction checkpoint was not written: {err.message}."
                )
                return None
            later, last = await self.deps.peers.tail(r.tenant, r.session_id, s.view_seq)
            if not any(e.run_id == r.run_id and display_extra(e).get("batch") == batch for e in later):
                self._diagnose(
                    "compaction_abandoned",
                    "A compaction pass was abandoned: the session changed while the summary was written.",
                    point=s.point,
                )
                self._defer("compaction_abandoned", {"turn": s.turn, "point": s.point})
                return None
            seq = last
        self._context.drop()
        self._last_usage, self._bytes_since = None, 0
        self._defer("compacted", {"turn": s.turn, "point": s.point, "session_seq": seq}, session_last_seq=seq)
        return s

    async def _finish_pending_checkpoint(self, entries: list[tuple[int, str, dict[str, Any]]]) -> None:
        """A summary the log holds without its checkpoint (the owner died between): write it."""
        pending = None
        for _, kind, payload in entries:
            if kind == "compaction_summarized":
                pending = payload
            elif kind in ("compacted", "compaction_abandoned") and pending is not None:
                if (payload.get("turn"), payload.get("point")) == (pending.get("turn"), pending.get("point")):
                    pending = None
        if pending is not None:
            await self._checkpoint(Summarized.from_payload(pending))
