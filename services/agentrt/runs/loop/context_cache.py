"""The run loop's copy of its session's context view, kept current from the log's tail.

Re-reading the whole context view every turn costs one full read of the session per turn
(004 §2.5c computes it from the whole log). A `ContextCache` lives as long as one run
executor and holds the view it last read or wrote, with the highest seq it knows and the
active leaf; a turn asks the session store only for the raw log after that seq
(ListEntries) and extends the copy. The session stays the source of truth: whenever what
the tail shows could change entries already in the view, the copy is dropped and the loop
reads the whole view again (GetContext). That is, a tail entry that is:

- a leaf move, an update or a compaction checkpoint (they re-shape or re-display entries
  already in the view);
- not linked to the known leaf (another branch, a rewritten log, a new incarnation);
- not numbered right after the previous one (something in between was not seen);

or a tail whose reported highest seq is not its last entry's (a page cut short, or a log
that moved backwards). An executor starts with no copy, so a resume or a takeover always
begins with a full read; a new run on a session with no entries seeds the copy as the empty
view at seq 0 before its input's append (decision 0058).

What an extension cannot see: an update written *before* the entry it targets (004 §2.5b
allows it). Entry ids are minted by storage, so only a call-id target can be written
ahead; it changes a tool call entry's display, which rendering does not read.

`TailReadAhead` holds one tail read begun early (when the executor's batch was written,
beside the save point that follows: decision 0017), or the tail the batch's own append
answered as of its commit (decisions 0020, 0057), and hands it over only while the copy is
still the one it was read for.

No grpc here: the loop feeds entries it got from its peers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from agentrt.v1 import session_service_pb2 as spb

#: Kinds that re-shape or re-display entries already in the view: a full read follows.
_RESHAPING = frozenset({"leaf", "update", "compaction"})
#: Kinds in the view (GetContext without include_unprojected).
_PROJECTED = frozenset({"item"})


class ContextCache:
    """A session's context view as of a known seq (see the module docstring)."""

    def __init__(self) -> None:
        """Start empty: the first `entries` call needs a full read."""
        self._entries: list[spb.Entry] = []
        self._last_seq = 0
        self._leaf = ""
        self._loaded = False
        self._version = 0

    @property
    def version(self) -> int:
        """A number that changes whenever the copy changes.

        A tail read begun at one version extends the copy only while the version holds.
        """
        return self._version

    @property
    def loaded(self) -> bool:
        """True when the copy can be extended from the tail."""
        return self._loaded

    @property
    def last_seq(self) -> int:
        """The highest session seq the copy accounts for."""
        return self._last_seq

    @property
    def leaf(self) -> str:
        """The active leaf as of `last_seq` ("" for an empty session)."""
        return self._leaf

    def entries(self) -> list[spb.Entry]:
        """Return the view's entries in order (a new list; the entries are shared)."""
        return list(self._entries)

    def reset(self, entries: Sequence[spb.Entry], last_seq: int, leaf: str) -> None:
        """Replace the copy with a full read (GetContext: view, highest seq, active leaf)."""
        self._entries = list(entries)
        self._last_seq = last_seq
        self._leaf = leaf
        self._loaded = True
        self._version += 1

    def drop(self) -> None:
        """Forget the copy: the next turn reads the whole view."""
        self._entries, self._last_seq, self._leaf, self._loaded = [], 0, "", False
        self._version += 1

    def extend(self, tail: Sequence[spb.Entry], last_seq: int | None = None) -> bool:
        """Apply raw log entries that follow the known seq, in seq order.

        Args:
            tail: entries from ListEntries(after_seq=last_seq) or an AppendEntries response.
            last_seq: the highest seq the store reported with them (None: not reported;
                an append's response is the whole batch).

        Returns:
            True when the copy is current; False when it was dropped (see the module
            docstring) and a full read is needed.
        """
        if not self._loaded:
            return False
        entries, seq, leaf = self._entries, self._last_seq, self._leaf
        added: list[spb.Entry] = []
        for entry in tail:
            if entry.seq != seq + 1 or entry.kind in _RESHAPING or entry.parent_id != leaf:
                self.drop()
                return False
            seq, leaf = entry.seq, entry.entry_id
            if entry.kind in _PROJECTED:
                added.append(entry)
        if last_seq is not None and last_seq != seq:
            self.drop()
            return False
        entries.extend(added)
        if seq != self._last_seq:
            self._version += 1
        self._last_seq, self._leaf = seq, leaf
        return True


#: A tail read: after_seq -> (raw log entries after it, the highest seq stored).
TailRead = Callable[[int], Awaitable[tuple[list[spb.Entry], int]]]


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a read's outcome as seen (a dropped read's error is no news)."""
    if not task.cancelled():
        task.exception()


class TailReadAhead:
    """At most one tail read in flight, begun for a copy at one version (see the module docstring)."""

    def __init__(self) -> None:
        """Hold nothing."""
        self._ahead: tuple[int, int, asyncio.Future[tuple[list[spb.Entry], int]]] | None = None

    def begin(self, cache: ContextCache, read: TailRead) -> None:
        """Start `read(cache.last_seq)` now (dropping any earlier one); nothing for an empty copy."""
        self.drop()
        if not cache.loaded:
            return
        task = asyncio.ensure_future(read(cache.last_seq))
        task.add_done_callback(_retrieve)
        self._ahead = (cache.version, cache.last_seq, task)

    def given(self, cache: ContextCache, tail: tuple[list[spb.Entry], int]) -> None:
        """Hold a tail already read for the copy as it is now (an append's include_tail answer).

        `take` hands it over on the same terms as a read begun here: only while the copy
        is still the one it was read for; nothing for an empty copy.
        """
        self.drop()
        if not cache.loaded:
            return
        done: asyncio.Future[tuple[list[spb.Entry], int]] = asyncio.get_running_loop().create_future()
        done.set_result(tail)
        self._ahead = (cache.version, cache.last_seq, done)

    def drop(self) -> None:
        """Cancel the read in flight, if any."""
        if self._ahead is not None:
            self._ahead[2].cancel()
            self._ahead = None

    async def take(self, cache: ContextCache) -> tuple[list[spb.Entry], int] | None:
        """Return the read's answer when it was begun for this very copy and succeeded.

        Returns:
            (entries, last seq) as the read answered; None when there is none, the copy
            changed since (the read is cancelled), or the read failed or was cancelled (the
            caller reads again, so an error surfaces from that read).

        Raises:
            asyncio.CancelledError: the caller itself was cancelled (the read is cancelled too).
        """
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        version, after_seq, task = ahead
        if version != cache.version or after_seq != cache.last_seq:
            task.cancel()
            return None
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                task.cancel()
                raise
            return None
        except Exception:  # noqa: BLE001 - the caller reads again and meets the error there
            return None
