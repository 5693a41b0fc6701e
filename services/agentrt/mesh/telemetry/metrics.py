"""Prometheus metrics of every service: the RPC series, the domain series, the /metrics endpoint.

One `CollectorRegistry` per server (never prometheus_client's global one), so two servers in
one process — as in the tests — keep separate counts. A service that has series of its own
creates them in a registry (`RunMetrics()`, `ToolMetrics()`, `SessionMetrics()`, `TaskMetrics()`
below, or the
gateway's `GatewayMetrics`) and hands that registry to its `MeshServer(registry=...)`, which
adds the RPC series and serves the whole registry on the service's metrics port.

RPC series (`RpcMetrics`, recorded by the server interceptor of telemetry/rpc.py for every
call, health and reflection included):

- `agentrt_rpc_server_requests_total` {service, method, code}: finished calls, `code` the
  gRPC status name (OK, NOT_FOUND, CANCELLED, ...);
- `agentrt_rpc_server_duration_seconds` {service, method, code}: histogram of call durations
  (for a stream: until its last message or its end), DURATION_BUCKETS;
- `agentrt_rpc_server_in_flight` {service, method}: calls being served now (open streams too).

`service` is the gRPC service ("agentrt.v1.RunService"), `method` the RPC ("StartRun").

The domain series are defined here, named and documented, so that a service only increments
them; docs/operations.md "Metrics" lists them per service. Gauges counting what lies in a
store (suspended runs, pending approvals, runs waiting for a replica) show the same value on
every replica: aggregate them with max(), not sum().
"""

from __future__ import annotations

import asyncio
import errno
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, start_http_server

#: Buckets of call durations, in seconds: 1 ms to 30 min (streams and tool calls are long).
DURATION_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0,
)  # fmt: skip
#: Buckets of queue waits, in seconds: from "not queued" to 10 min.
WAIT_BUCKETS = (0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)


class RpcMetrics:
    """The RPC series of one server (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        """Create the series in registry."""
        self.requests = Counter(
            "agentrt_rpc_server_requests",
            "Finished RPCs, by gRPC service, method and status code.",
            ["service", "method", "code"],
            registry=registry,
        )
        self.duration = Histogram(
            "agentrt_rpc_server_duration_seconds",
            "Duration of RPCs (streams until their end), in seconds, by service, method and status code.",
            ["service", "method", "code"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.in_flight = Gauge(
            "agentrt_rpc_server_in_flight",
            "RPCs being served now (open streams included), by service and method.",
            ["service", "method"],
            registry=registry,
        )


class RunMetrics:
    """The run loop's series (RunService).

    The attributes are the metric objects; a runs replica increments them, and sets the
    store-wide gauges from its lease loop (`observe_store`).

    Attributes:
        runs_running: `agentrt_runs_running`, gauge: runs executing on this replica
            (inc when an executor starts, dec when it ends, suspends or is stopped).
        runs_suspended: `agentrt_runs_suspended`, gauge (store-wide): runs waiting for an
            approval or a client tool's result.
        pending_approvals: `agentrt_runs_pending_approvals`, gauge (store-wide): tool calls
            waiting for an approval decision.
        runs_waiting_for_replica: `agentrt_runs_waiting_for_replica`, gauge (store-wide):
            runs that should be executing and that no live replica holds (an expired lease
            not yet taken over, a resumed run not yet claimed): the signal an autoscaler
            scales the runs Deployment on (max over replicas > 0 for long = too few).
        runs_started: `agentrt_runs_started_total`, counter: StartRun calls that created a run.
        runs_finished: `agentrt_runs_finished_total` {status}: runs that ended, status
            "completed", "failed" or "canceled".
        turns: `agentrt_runs_turns_total`, counter: turns begun.
        tool_queue_wait: `agentrt_runs_tool_queue_wait_seconds`, histogram: how long a tool
            call waited for the run's tool-concurrency cap before it was sent.
        replica_wait: `agentrt_runs_replica_wait_seconds`, histogram: how long a run waited
            between losing its replica (lease expiry) or being resumed and a replica taking it.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """Create the series in registry (a new one when None: `self.registry`)."""
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.runs_running = Gauge("agentrt_runs_running", "Runs executing on this replica.", registry=r)
        self.runs_suspended = Gauge(
            "agentrt_runs_suspended",
            "Runs waiting for an approval or a client tool result (store-wide).",
            registry=r,
        )
        self.pending_approvals = Gauge(
            "agentrt_runs_pending_approvals",
            "Tool calls waiting for an approval decision (store-wide).",
            registry=r,
        )
        self.runs_waiting_for_replica = Gauge(
            "agentrt_runs_waiting_for_replica",
            "Runs that should execute and that no live replica holds (store-wide); scale runs on it.",
            registry=r,
        )
        self.runs_started = Counter("agentrt_runs_started", "Runs created by StartRun.", registry=r)
        self.runs_finished = Counter(
            "agentrt_runs_finished",
            "Runs that ended, by status (completed, failed, canceled).",
            ["status"],
            registry=r,
        )
        self.turns = Counter("agentrt_runs_turns", "Turns begun.", registry=r)
        self.tool_queue_wait = Histogram(
            "agentrt_runs_tool_queue_wait_seconds",
            "Time a tool call waited for the run's tool-concurrency cap, in seconds.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.replica_wait = Histogram(
            "agentrt_runs_replica_wait_seconds",
            "Time a run waited for a replica to take it (after lease expiry or resume), in seconds.",
            buckets=WAIT_BUCKETS,
            registry=r,
        )

    def observe_store(self, *, suspended: int, pending_approvals: int, waiting_for_replica: int) -> None:
        """Set the store-wide gauges (counts read from the runs store, e.g. by the lease loop)."""
        self.runs_suspended.set(suspended)
        self.pending_approvals.set(pending_approvals)
        self.runs_waiting_for_replica.set(waiting_for_replica)


class ToolMetrics:
    """The tool service's series (ToolService).

    Attributes:
        sandbox_commands: `agentrt_tools_sandbox_commands_total` {backend, outcome}: commands
            run, backend "bwrap", "unconfined" or "docker", outcome "exit_zero", "exit_nonzero",
            "timeout", "interrupted" (the caller's deadline, a cancel, StopSandbox), "refused"
            (a policy or its arguments: nothing ran) or "unavailable" (no sandbox).
        sandbox_command_duration: `agentrt_tools_sandbox_command_duration_seconds` {backend}.
        sandbox_commands_running: `agentrt_tools_sandbox_commands_running` {backend}, gauge.
        tool_calls: `agentrt_tools_calls_total` {tool, outcome}: ExecuteTool calls, outcome
            "ok", "error" (a result with is_error), or "replayed" (answered from the journal).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """Create the series in registry (a new one when None: `self.registry`)."""
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.sandbox_commands = Counter(
            "agentrt_tools_sandbox_commands",
            "Sandbox commands run, by backend and outcome.",
            ["backend", "outcome"],
            registry=r,
        )
        self.sandbox_command_duration = Histogram(
            "agentrt_tools_sandbox_command_duration_seconds",
            "Duration of sandbox commands, in seconds, by backend.",
            ["backend"],
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.sandbox_commands_running = Gauge(
            "agentrt_tools_sandbox_commands_running",
            "Sandbox commands running now, by backend.",
            ["backend"],
            registry=r,
        )
        self.tool_calls = Counter(
            "agentrt_tools_calls",
            "Tool calls executed, by tool and outcome (ok, error, replayed).",
            ["tool", "outcome"],
            registry=r,
        )


class SessionMetrics:
    """The session store's series (SessionService).

    Attributes:
        appends: `agentrt_sessions_appends_total` {outcome}: AppendEntries calls, outcome
            "ok", "seq_mismatch" (a lost compare-and-set) or "refused" (bad input).
        entries_appended: `agentrt_sessions_entries_appended_total`: entries written.
        watchers: `agentrt_sessions_watchers`, gauge: WatchSession streams open on this replica.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """Create the series in registry (a new one when None: `self.registry`)."""
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.appends = Counter(
            "agentrt_sessions_appends", "AppendEntries calls, by outcome.", ["outcome"], registry=r
        )
        self.entries_appended = Counter(
            "agentrt_sessions_entries_appended", "Session entries written.", registry=r
        )
        self.watchers = Gauge(
            "agentrt_sessions_watchers", "WatchSession streams open on this replica.", registry=r
        )


class TaskMetrics:
    """The task service's series (TaskService).

    Attributes:
        spawns: `agentrt_tasks_spawns_total` {outcome}: SpawnTask calls, outcome "ok" (a
            task created or replayed by its idempotency key) or the refusal's lower-cased
            reason (e.g. "task_limit", "task_depth_limit", "session_not_found").
        retries: `agentrt_tasks_retries_total` {launched}: RetryTask calls that answered,
            launched "true" when a new attempt started.
        stops: `agentrt_tasks_stops_total` {outcome}: StopTask calls, outcome "canceled",
            "after_turn", "already_finished" or "finished_first".
        watchers: `agentrt_tasks_watchers`, gauge: WatchTasks streams open on this replica.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        """Create the series in registry (a new one when None: `self.registry`)."""
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.spawns = Counter("agentrt_tasks_spawns", "SpawnTask calls, by outcome.", ["outcome"], registry=r)
        self.retries = Counter(
            "agentrt_tasks_retries", "RetryTask calls, by whether one started.", ["launched"], registry=r
        )
        self.stops = Counter("agentrt_tasks_stops", "StopTask calls, by outcome.", ["outcome"], registry=r)
        self.watchers = Gauge("agentrt_tasks_watchers", "WatchTasks streams open here.", registry=r)


class MetricsPortTakenError(OSError):
    """The metrics port is taken (EADDRINUSE).

    Attributes:
        port: the metrics port.
    """

    def __init__(self, port: int, message: str) -> None:
        super().__init__(errno.EADDRINUSE, message)
        self.port = port


class MetricsEndpoint:
    """Serves a registry as `/metrics` over HTTP on a thread of its own (prometheus_client's server)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        """Serve registry once `start` is called."""
        self.registry = registry
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port; 0 while not serving."""
        return int(self._server.server_port) if self._server is not None else 0

    def start(self, host: str, port: int) -> int:
        """Serve on host:port (every path answers with the registry); return the bound port.

        Raises:
            MetricsPortTakenError: the port is taken.
            OSError: the address cannot be bound otherwise.
        """
        try:
            self._server, self._thread = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise MetricsPortTakenError(port, f"cannot serve metrics on {host}:{port}: {exc}") from exc
            raise
        return self.port

    async def stop(self) -> None:
        """Stop serving (no-op when not serving); the socket is closed when this returns."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            await asyncio.to_thread(server.shutdown)
            server.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def exposition(self) -> bytes:
        """Return the registry in the Prometheus text format."""
        return generate_latest(self.registry)
