"""SessionService configuration: the only place its environment is read."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.mesh.config import DEFAULT_PORTS, ServerConfig, edge_from_env, env
from agentrt.mesh.storage.db import sqlite_url


@dataclass(frozen=True)
class SessionsConfig:
    """How the session store listens and where it keeps sessions.

    Attributes:
        server: listening and state settings; `server.db_url` is the sessions database.
        watch_poll_seconds: the longest a WatchSession tail sleeps before re-reading the
            database, in seconds; bounds the delay for appends made by another replica
            (appends made by this process wake the tail at once).
    """

    server: ServerConfig = field(default_factory=ServerConfig)
    watch_poll_seconds: float = 1.0

    @classmethod
    def from_env(cls, port: int | None = None, db_url: str | None = None) -> SessionsConfig:
        """Build from flags, falling back to the environment.

        Reads AGENTRT_SESSIONS_PORT, AGENTRT_SESSIONS_DB (default: sessions.db under
        AGENTRT_STATE_DIR), AGENTRT_STATE_DIR, the security settings of `edge_from_env`, AGENTRT_HOST and
        AGENTRT_SESSIONS_WATCH_POLL_SECONDS.
        """
        state_dir = env("STATE_DIR", ".agentrt")
        return cls(
            server=ServerConfig(
                host=env("HOST", "127.0.0.1"),
                port=port if port is not None else int(env("SESSIONS_PORT", str(DEFAULT_PORTS["sessions"]))),
                db_url=db_url or env("SESSIONS_DB", sqlite_url(state_dir, "sessions")),
                **edge_from_env("sessions"),
                state_dir=state_dir,
            ),
            watch_poll_seconds=float(env("SESSIONS_WATCH_POLL_SECONDS", "1.0")),
        )
