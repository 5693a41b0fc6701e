"""TaskService configuration: the only place its environment is read."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrt.mesh.config import DEFAULT_PORTS, ServerConfig, edge_from_env, env


@dataclass(frozen=True)
class TasksConfig:
    """How the task manager listens and which run loop it drives.

    Attributes:
        server: listening and state settings.
        runs_address: "host:port" of RunService (starts and stops a task's runs).
    """

    server: ServerConfig = field(default_factory=ServerConfig)
    runs_address: str = ""

    @classmethod
    def from_env(
        cls, port: int | None = None, db_url: str | None = None, runs: str | None = None
    ) -> TasksConfig:
        """Build from flags, falling back to the environment.

        Variables: AGENTRT_TASKS_PORT, AGENTRT_TASKS_DB, AGENTRT_RUNS_ADDR, AGENTRT_STATE_DIR,
        AGENTRT_HOST and the security settings of `edge_from_env`.
        """
        state_dir = env("STATE_DIR", ".agentrt")
        return cls(
            server=ServerConfig(
                host=env("HOST", "127.0.0.1"),
                port=port if port is not None else int(env("TASKS_PORT", str(DEFAULT_PORTS["tasks"]))),
                db_url=db_url or env("TASKS_DB", ""),
                **edge_from_env("tasks"),
                state_dir=state_dir,
            ),
            runs_address=runs or env("RUNS_ADDR", f"127.0.0.1:{DEFAULT_PORTS['runs']}"),
        )
