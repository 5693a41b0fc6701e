"""RunService configuration: the only place the run loop's environment is read (004 §2.14)."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.mesh.config import DEFAULT_PORTS, ServerConfig, edge_from_env, env, flag
from agentrt.mesh.storage.db import sqlite_url

DEFAULT_MODEL = "local:smollm2"


def _peer(flag: str | None, name: str, service: str) -> str:
    return flag or env(name, f"127.0.0.1:{DEFAULT_PORTS[service]}")


@dataclass(frozen=True)
class RunsConfig:
    """How the run loop listens, which peers it calls, and its run-level defaults.

    Attributes:
        server: listening and state settings; `server.db_url` is the runs database.
        gateway_address: "host:port" of ModelGatewayService.
        tools_address: "host:port" of ToolService.
        sessions_address: "host:port" of SessionService.
        tasks_address: "host:port" of TaskService.
        default_model: "provider:model" for agents that name no model.
        replica_id: this process's lease owner name ("" = minted at start).
        lease_seconds: how long a run's lease lasts without renewal, in seconds; the owner
            renews it every third of that.
        subscriber_buffer: events buffered per stream subscriber before it is behind.
        poll_seconds: the longest an event stream waits before re-reading the database
            (events written by another replica), in seconds.
        tool_call_grace_seconds: added to a tool's own timeout for the ExecuteTool deadline.
        peer_unavailable_seconds: how long a peer call waits for a peer that is not
            reachable (not up yet after a restart, or restarting) to have a READY replica
            (gRPC's channel connectivity), before the run fails with kind "unavailable", in
            seconds.
        crash_points: named points at which the process kills itself with SIGKILL (the
            crash tests' kill -9 at a moment no event shows; see runs/loop/deps.py CRASH_POINTS).
            Empty in production.
        peer_streams: a run's turn calls (StreamGenerate, ExecuteTool, AppendEntries) go over
            one stream of calls per peer (runs/peers/streams.py) instead of an RPC each.
    """

    server: ServerConfig = field(default_factory=ServerConfig)
    gateway_address: str = f"127.0.0.1:{DEFAULT_PORTS['gateway']}"
    tools_address: str = f"127.0.0.1:{DEFAULT_PORTS['tools']}"
    sessions_address: str = f"127.0.0.1:{DEFAULT_PORTS['sessions']}"
    tasks_address: str = f"127.0.0.1:{DEFAULT_PORTS['tasks']}"
    default_model: str = DEFAULT_MODEL
    replica_id: str = ""
    lease_seconds: float = 30.0
    subscriber_buffer: int = 1024
    poll_seconds: float = 1.0
    tool_call_grace_seconds: float = 30.0
    peer_unavailable_seconds: float = 30.0
    crash_points: tuple[str, ...] = ()
    peer_streams: bool = True

    @classmethod
    def from_env(
        cls,
        port: int | None = None,
        db_url: str | None = None,
        gateway: str | None = None,
        tools: str | None = None,
        sessions: str | None = None,
        tasks: str | None = None,
    ) -> RunsConfig:
        """Build from flags, falling back to the environment.

        Reads AGENTRT_RUNS_PORT, AGENTRT_RUNS_DB (default: runs.db under the state dir),
        AGENTRT_GATEWAY_ADDR, AGENTRT_TOOLS_ADDR, AGENTRT_SESSIONS_ADDR, AGENTRT_TASKS_ADDR
        (default 127.0.0.1 on DEFAULT_PORTS), AGENTRT_DEFAULT_MODEL (default
        "local:smollm2"), AGENTRT_STATE_DIR, the security settings of `edge_from_env`, AGENTRT_HOST,
        AGENTRT_RUNS_REPLICA_ID, AGENTRT_RUNS_LEASE_SECONDS and
        AGENTRT_RUNS_PEER_UNAVAILABLE_SECONDS (default 30), AGENTRT_RUNS_PEER_STREAMS (default
        true), AGENTRT_RUNS_CRASH_POINTS (comma separated; tests only).

        Raises:
            ValueError: AGENTRT_RUNS_PEER_STREAMS is not a boolean.
        """
        state_dir = env("STATE_DIR", ".agentrt")
        return cls(
            server=ServerConfig(
                host=env("HOST", "127.0.0.1"),
                port=port if port is not None else int(env("RUNS_PORT", str(DEFAULT_PORTS["runs"]))),
                db_url=db_url or env("RUNS_DB", sqlite_url(state_dir, "runs")),
                **edge_from_env("runs"),
                state_dir=state_dir,
            ),
            gateway_address=_peer(gateway, "GATEWAY_ADDR", "gateway"),
            tools_address=_peer(tools, "TOOLS_ADDR", "tools"),
            sessions_address=_peer(sessions, "SESSIONS_ADDR", "sessions"),
            tasks_address=_peer(tasks, "TASKS_ADDR", "tasks"),
            default_model=env("DEFAULT_MODEL", DEFAULT_MODEL),
            replica_id=env("RUNS_REPLICA_ID", ""),
            lease_seconds=float(env("RUNS_LEASE_SECONDS", "30")),
            peer_unavailable_seconds=float(env("RUNS_PEER_UNAVAILABLE_SECONDS", "30")),
            crash_points=tuple(p.strip() for p in env("RUNS_CRASH_POINTS", "").split(",") if p.strip()),
            peer_streams=flag("RUNS_PEER_STREAMS", default=True),
        )
