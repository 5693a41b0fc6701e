"""TaskService configuration: the only place its environment is read (004 §2.14)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.mesh.config import DEFAULT_PORTS, ServerConfig, edge_from_env, env
from agentrt.mesh.storage.db import sqlite_url
from agentrt.tasks.domain import Limits


def _peer(flag: str | None, name: str, service: str) -> str:
    return flag or env(name, f"127.0.0.1:{DEFAULT_PORTS[service]}")


@dataclass(frozen=True)
class TasksConfig:
    """How the task manager listens, which peers it drives, and its bounds.

    Attributes:
        server: listening and state settings; `server.db_url` is the tasks database.
        runs_address: "host:port" of RunService (starts, follows and stops a task's runs).
        sessions_address: "host:port" of SessionService (hidden sessions, parent checks,
            notification entries).
        limits: the bounds of 004 §2.13 (depth 1, 6 live tasks per parent, 3 attempts,
            50 chained runs, 300-character summaries, a 120 s wait).
        replica_id: this process's lease owner name ("" = minted at start). A stable name
            (a StatefulSet pod's) lets a restarted replica take its own leases back at once.
        lease_seconds: how long a live task's lease lasts without renewal, in seconds; the
            owner renews every third of it, and another replica adopts the task after it.
        poll_seconds: the longest a wait (GetTask, WatchTasks) goes before re-reading the
            database for changes made by another replica, in seconds.
        notify_grace_seconds: how long an ending waits before it is notified to the parent
            session, in seconds (a model waiting on it in-turn takes it first).
        hold_seconds: how long a result handed to a model stays held from notification
            while its acknowledgement is awaited, in seconds.
        stop_wait_seconds: a stop's bounded wait for a finished run's late outcome, in seconds.
        cancel_wait_seconds: how long a retry waits for the previous attempt's run to end
            after cancelling it, in seconds.
        parent_check_seconds: how often each parent session is checked for deletion, in seconds.
        peer_unavailable_seconds: how long a peer call waits for a peer that is not
            reachable, re-sending with capped backoff, in seconds.
    """

    server: ServerConfig = field(default_factory=ServerConfig)
    runs_address: str = f"127.0.0.1:{DEFAULT_PORTS['runs']}"
    sessions_address: str = f"127.0.0.1:{DEFAULT_PORTS['sessions']}"
    limits: Limits = field(default_factory=Limits)
    replica_id: str = ""
    lease_seconds: float = 15.0
    poll_seconds: float = 0.5
    notify_grace_seconds: float = 2.0
    hold_seconds: float = 300.0
    stop_wait_seconds: float = 5.0
    cancel_wait_seconds: float = 15.0
    parent_check_seconds: float = 30.0
    peer_unavailable_seconds: float = 30.0

    @classmethod
    def from_env(
        cls,
        port: int | None = None,
        db_url: str | None = None,
        runs: str | None = None,
        sessions: str | None = None,
    ) -> TasksConfig:
        """Build from flags, falling back to the environment.

        Reads AGENTRT_TASKS_PORT, AGENTRT_TASKS_DB (default: tasks.db under the state dir),
        AGENTRT_RUNS_ADDR, AGENTRT_SESSIONS_ADDR, AGENTRT_STATE_DIR,
        AGENTRT_HOST, AGENTRT_TASKS_REPLICA_ID, AGENTRT_TASKS_LEASE_SECONDS,
        AGENTRT_TASKS_MAX_DEPTH, AGENTRT_TASKS_MAX_LIVE_PER_PARENT, AGENTRT_TASKS_MAX_ATTEMPTS,
        AGENTRT_TASKS_MAX_CONTINUATIONS, AGENTRT_TASKS_NOTIFY_GRACE_SECONDS and the security
        settings of `edge_from_env`.

        Raises:
            ValueError: a numeric variable is not a number, or a bound is below 1.
        """
        state_dir = env("STATE_DIR", ".agentrt")
        limits = Limits(
            max_depth=int(env("TASKS_MAX_DEPTH", "1")),
            max_live_per_parent=int(env("TASKS_MAX_LIVE_PER_PARENT", "6")),
            max_attempts=int(env("TASKS_MAX_ATTEMPTS", "3")),
            max_continuations=int(env("TASKS_MAX_CONTINUATIONS", "50")),
        )
        for name in ("max_depth", "max_live_per_parent", "max_attempts"):
            if getattr(limits, name) < 1:
                raise ValueError(f"AGENTRT_TASKS_{name.upper()} must be at least 1")
        if limits.max_continuations < 0:
            raise ValueError("AGENTRT_TASKS_MAX_CONTINUATIONS must not be negative")
        return cls(
            server=ServerConfig(
                host=env("HOST", "127.0.0.1"),
                port=port if port is not None else int(env("TASKS_PORT", str(DEFAULT_PORTS["tasks"]))),
                db_url=db_url or env("TASKS_DB", sqlite_url(state_dir, "tasks")),
                **edge_from_env("tasks"),
                state_dir=state_dir,
            ),
            runs_address=_peer(runs, "RUNS_ADDR", "runs"),
            sessions_address=_peer(sessions, "SESSIONS_ADDR", "sessions"),
            limits=limits,
            replica_id=env("TASKS_REPLICA_ID", ""),
            lease_seconds=float(env("TASKS_LEASE_SECONDS", "15")),
            notify_grace_seconds=float(env("TASKS_NOTIFY_GRACE_SECONDS", "2")),
        )
