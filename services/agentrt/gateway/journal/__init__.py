"""The gateway's model-call journal (decision 0019): keyed calls reach a provider once.

`CallJournal` (calls.py) routes keyed Generate/StreamGenerate calls, one `Flight` (flight.py)
per key in a process, through a `JournalStore`: `MemoryJournalStore` (store.py: this process
only) or `SqlJournalStore` (sql.py: SQLite or PostgreSQL, shared by every replica).
`build_store(url)` picks one from a URL.
"""

from __future__ import annotations

from agentrt.gateway.journal.calls import CallJournal
from agentrt.gateway.journal.flight import fingerprint, replay_items
from agentrt.gateway.journal.store import JournalStore, MemoryJournalStore, Row, State

#: The journal URL that keeps the journal in the process (no shared store).
MEMORY = "memory"


def build_store(
    url: str, *, timeout_s: float = 5.0, pool_size: int = 3, max_overflow: int = 2
) -> JournalStore:
    """Return the store of url: "memory", sqlite+aiosqlite:///FILE or postgresql+asyncpg://....

    Raises:
        ValueError: any other URL.
    """
    if url == MEMORY:
        return MemoryJournalStore()
    from agentrt.gateway.journal.sql import SqlJournalStore

    return SqlJournalStore(url, timeout_s=timeout_s, pool_size=pool_size, max_overflow=max_overflow)


__all__ = [
    "MEMORY",
    "CallJournal",
    "JournalStore",
    "MemoryJournalStore",
    "Row",
    "State",
    "build_store",
    "fingerprint",
    "replay_items",
]
