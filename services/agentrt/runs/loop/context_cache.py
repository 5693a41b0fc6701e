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
that moved backwards). An executor starts with an empty copy, so a resume or a takeover
always begins with a full read.

What an extension cannot see: an update written *before* the entry it targets (004 §2.5b
allows it). Entry ids are minted by storage, so only a call-id target can be written
ahead; it changes a tool call entry's display, which rendering does not read.

No grpc here: the loop feeds entries it got from its peers.
"""

from __future__ import annotations

from collections.abc import Sequence

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
