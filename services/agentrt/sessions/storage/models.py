"""The session store's tables (SQLAlchemy 2, typed `Mapped[...]` columns).

- `sessions`: one row per live session incarnation: existence is recorded, not inferred
  from entries (004 §2.5e). Deleting a session removes its row (and its entries); the row
  is the proof a write checks inside its own transaction (004 §2.5e2).
- `session_entries`: the append-only log. Unique (tenant, session_id, generation, seq)
  and (tenant, session_id, generation, entry_id) are the backstop for positions: a race
  that slipped past the write lock is a failed write, never two rows answering to one
  seq or id.
- `session_marks`: one row per (tenant, session_id) ever used, never deleted. It holds the
  highest seq and generation ever issued, so a seq is never reused after delete +
  recreate and never restarted by a replace (004 §2.5e2).

Times are integer microseconds since the Unix epoch (portable across SQLite and
PostgreSQL, and exact for ordering). Schema changes go through Alembic
(agentrt/sessions/migrations); `metadata` here is what the migrations must produce.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Boolean, Index, Integer, LargeBinary, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

ID = String(128)
TENANT = String(64)


class Base(DeclarativeBase):
    """Declarative base of the session store's tables (its own MetaData)."""

    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(table_name)s_%(column_0_N_name)s",
            "uq": "uq_%(table_name)s_%(column_0_N_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


class SessionRow(Base):
    """A live session incarnation (004 §2.5e)."""

    __tablename__ = "sessions"

    tenant: Mapped[str] = mapped_column(TENANT, primary_key=True)
    session_id: Mapped[str] = mapped_column(ID, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger)
    hidden: Mapped[bool] = mapped_column(Boolean, default=False)
    parent_session_id: Mapped[str] = mapped_column(ID, default="")
    parent_generation: Mapped[int] = mapped_column(BigInteger, default=0)
    title: Mapped[str] = mapped_column(Text, default="")
    metadata_json: Mapped[str] = mapped_column(Text, default="{}")
    create_time_us: Mapped[int] = mapped_column(BigInteger)
    update_time_us: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        Index(None, "tenant", "hidden", "update_time_us", "session_id"),
        Index(None, "tenant", "parent_session_id"),
    )


class EntryRow(Base):
    """One stored entry (004 §2.5b); see `agentrt.sessions.domain.Entry` for the fields."""

    __tablename__ = "session_entries"

    tenant: Mapped[str] = mapped_column(TENANT, primary_key=True)
    session_id: Mapped[str] = mapped_column(ID, primary_key=True)
    generation: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    seq: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    entry_id: Mapped[str] = mapped_column(ID)
    parent_id: Mapped[str] = mapped_column(ID, default="")
    kind: Mapped[str] = mapped_column(String(64))
    item: Mapped[bytes | None] = mapped_column(LargeBinary, nullable=True)
    item_type: Mapped[str] = mapped_column(String(16), default="")
    call_id: Mapped[str] = mapped_column(String(256), default="")
    tool_name: Mapped[str] = mapped_column(String(256), default="")
    payload_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    display_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    run_id: Mapped[str] = mapped_column(ID, default="")
    turn: Mapped[int] = mapped_column(Integer, default=0)
    response_id: Mapped[str] = mapped_column(String(256), default="")
    usage_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    nested_usage_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    target_entry_id: Mapped[str] = mapped_column(ID, default="")
    target_call_id: Mapped[str] = mapped_column(String(256), default="")
    folded_ids_json: Mapped[str | None] = mapped_column(Text, nullable=True)
    summary: Mapped[str | None] = mapped_column(Text, nullable=True)
    leaf_entry_id: Mapped[str] = mapped_column(ID, default="")
    create_time_us: Mapped[int] = mapped_column(BigInteger)

    __table_args__ = (
        Index(None, "tenant", "session_id", "generation", "entry_id", unique=True),
        Index(None, "tenant", "session_id", "generation", "response_id"),
    )


class MarkRow(Base):
    """The high-water marks of a (tenant, session_id): never deleted (004 §2.5e2)."""

    __tablename__ = "session_marks"

    tenant: Mapped[str] = mapped_column(TENANT, primary_key=True)
    session_id: Mapped[str] = mapped_column(ID, primary_key=True)
    last_seq: Mapped[int] = mapped_column(BigInteger, default=0)
    last_generation: Mapped[int] = mapped_column(BigInteger, default=0)


metadata = Base.metadata
