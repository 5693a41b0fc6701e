"""An append's batch made ready for one database step, and the answers that step can give.

Pure (no I/O): the store prepares a validated batch here (ids and creation time minted, the
batch linked to itself, the leaf-move targets and usage keys it must check), runs it as one
database step on either backend (`sql_sqlite.append`, `sql_postgres.append`), and turns the
step's answer into stored entries (`Prepared.stored`) or the refusal the caller gets
(`refusal`). The step itself claims the session, reads the append point, checks the fence
and the batch against the log, mints seqs from the never-deleted high-water mark and inserts
(004 §2.5, §2.5b, §2.5d, §2.5e2, §2.7f; the order is store.py's module docstring).

Invariants: a batch's parents are fixed by the log only at its first entry (the active leaf
when the step runs); every later entry's parent is the leaf after the entry before it
(as `tree.link` links), known before the step. Seqs are base + 1 .. base + len(batch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from agentrt.core.errors import MeshError, Reason, Status, invalid, not_found, quote
from agentrt.core.ids import new_id
from agentrt.sessions.domain import LEAF, Entry, Ref
from agentrt.sessions.storage import queries as q

#: Answers of the step besides "ok" (sessions migration 0002 returns the same words).
NO_SESSION = "no_session"
STALE = "stale"
SEQ_MISMATCH = "seq_mismatch"
ENTRY_NOT_FOUND = "entry_not_found"
LEAF_TARGET = "leaf_target"
USAGE_RECORDED = "usage_recorded"


def usage_key(entry: Entry) -> tuple[str, int, str]:
    """The model response an entry's usage belongs to: (run_id, turn, response_id).

    004 §2.7f: one entry per response carries its usage. A provider's response id alone
    does not name a response: compatible servers repeat ids (a constant one, or one per
    connection), and a run's second turn would be refused as a double bill. A run writes
    one response per turn, so the run and turn it names complete the key; a writer that
    names neither (run_id "", turn 0) is keyed by the response id alone.
    """
    return entry.run_id, entry.turn, entry.response_id


@dataclass(frozen=True)
class Prepared:
    """A validated batch ready for its database step.

    Attributes:
        batch: the entries as the caller sent them (validated), in order.
        ids: the entry id minted for each, in order.
        parents: each entry's parent, in order; the first is "" (the step reads the active
            leaf it follows), each later one the leaf after the entry before it.
        leaf_targets: the distinct entry ids the batch's leaf moves name, sorted.
        usage_keys: the distinct (run_id, turn, response_id) the batch carries usage for
            (entries with a response id only), sorted.
        now_us: the write's time (microseconds since the epoch): the entries' creation
            time and the session's change record.
    """

    batch: Sequence[Entry]
    ids: list[str]
    parents: list[str]
    leaf_targets: list[str]
    usage_keys: list[tuple[str, int, str]]
    now_us: int

    def stored(self, base: int, first_parent: str) -> list[Entry]:
        """The entries as stored: seqs base + 1 .. base + n, ids, parents and time set."""
        now, ids, parents = self.now_us, self.ids, self.parents
        return [
            dataclasses.replace(
                e,
                entry_id=ids[i],
                seq=base + i + 1,
                parent_id=parents[i] if i else first_parent,
                create_time_us=now,
            )
            for i, e in enumerate(self.batch)
        ]


def prepare(batch: Sequence[Entry], now_us: int) -> Prepared:
    """Mint ids, stamp the time and link a validated batch (see the module docstring).

    Args:
        batch: 1..1,000 entries that passed `domain.validate_entries`, in order.
        now_us: the write's time, microseconds since the epoch.
    """
    ids = [new_id("ent") for _ in batch]
    parents = [""]
    for i in range(1, len(batch)):
        before = batch[i - 1]
        parents.append(before.leaf_entry_id if before.kind == LEAF else ids[i - 1])
    targets = sorted({e.leaf_entry_id for e in batch if e.kind == LEAF})
    keys = sorted({usage_key(e) for e in batch if e.usage is not None and e.response_id})
    return Prepared(batch, ids, parents[: len(batch)], targets, keys, now_us)


def refusal(
    answer: str,
    ref: Ref,
    expected: int | None,
    generation: int,
    value: int,
    text: str,
    turn: int,
    response: str,
) -> MeshError:
    """The error the caller gets for a step that refused the batch (nothing was written).

    Args:
        answer: one of the module's answer words.
        ref: the session as the caller named it.
        expected: the caller's expected_last_seq.
        generation: the session's current generation (STALE).
        value: the log's last seq (SEQ_MISMATCH).
        text: the leaf-move target (ENTRY_NOT_FOUND, LEAF_TARGET), or the run id (USAGE_RECORDED).
        turn: the turn (USAGE_RECORDED).
        response: the response id (USAGE_RECORDED).

    Returns:
        NOT_FOUND/SESSION_NOT_FOUND, NOT_FOUND/STALE_GENERATION, ABORTED/SEQ_MISMATCH,
        NOT_FOUND/ENTRY_NOT_FOUND, INVALID_ARGUMENT/INVALID_ENTRY (a leaf move as leaf
        target) or FAILED_PRECONDITION/USAGE_ALREADY_RECORDED (004 §2.7f).
    """
    if answer == NO_SESSION:
        return q.no_session(ref.session_id)
    if answer == STALE:
        return q.stale(ref, generation)
    if answer == SEQ_MISMATCH:
        return MeshError(
            Status.ABORTED,
            Reason.SEQ_MISMATCH,
            f"the session's last seq is {value}, not {expected}",
            {"last_seq": str(value)},
        )
    if answer == ENTRY_NOT_FOUND:
        return not_found(Reason.ENTRY_NOT_FOUND, f"entry {quote(text)} not found", entry_id=text)
    if answer == LEAF_TARGET:
        return invalid(Reason.INVALID_ENTRY, f"entry {quote(text)} is a leaf move and cannot be a leaf")
    if answer == USAGE_RECORDED:
        return MeshError(
            Status.FAILED_PRECONDITION,
            Reason.USAGE_ALREADY_RECORDED,
            f"usage of response {quote(response)} (run {quote(text)}, turn {turn}) is already "
            "recorded in this session (004 §2.7f)",
            {"response_id": response, "run_id": text, "turn": str(turn)},
        )
    raise ValueError(f"unknown answer {answer!r} of the append step")


def lost_race() -> MeshError:
    """ABORTED/SEQ_MISMATCH for an insert that met the unique positions (the backstop)."""
    return MeshError(Status.ABORTED, Reason.SEQ_MISMATCH, "a concurrent write took this position; retry")
