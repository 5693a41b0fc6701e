"""`agentrt serve all`: the five services in one process, the run loop's turn calls without the wire.

Every service keeps its own port, database, metrics port and health (the same
`AGENTRT_<SVC>_*` settings `agentrt serve <svc>` reads, each service its own `from_env`), so
clients, other replicas and probes see five services as before. What changes is inside
the process: the runs service calls the gateway, the tool service and the session store
that live beside it over `LocalStream`s (mesh/local_calls.py) for a turn's three calls,
and over gRPC to its own ports for everything else (decision 0056). Each peer address is
this process's own service, whatever `AGENTRT_<PEER>_ADDR` says. AGENTRT_HEALTH_PORT, the
plaintext probe port, is one port for the process: it serves the runs service's health
(SERVING only while all five serve; see HEALTH_PORT_SERVICE).

Lifecycle: the services start in `START_ORDER` (runs last: it takes over unfinished runs
at start and drives them through its peers at once); SIGTERM/SIGINT stops them side by side
(`stop_all`), as five processes drain, so the process exits within about one drain
(AGENTRT_DRAIN_SECONDS), not one per service; what runs' peers serve to its run loop (their
local streams, and what their `close` hook would end) lasts until runs has drained, so its
drain hands its runs over while its peers still serve it. The loop is asyncio's: the tool service's
sandboxes cannot run under uvloop (cli/serve.py).

Exit status: as `agentrt serve` (0 after a clean drain; 98 when a port is taken; 2 for a
flag `serve all` does not take, a port of 0, or a bad `AGENTRT_*` value; 1 otherwise).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import logging
import signal
import sys
from typing import Any

from agentrt.cli.args import check_db_url
from agentrt.cli.tls import apply_server_flags
from agentrt.mesh.local_calls import LocalCalls

log = logging.getLogger("agentrt.cli")

#: Start order: runs last (see the module docstring); they stop side by side (`stop_all`).
START_ORDER = ("sessions", "tools", "gateway", "tasks", "runs")
#: The service whose health AGENTRT_HEALTH_PORT serves: one port for the process, and runs
#: starts last and stops first, so it is SERVING there only while all five serve.
HEALTH_PORT_SERVICE = "runs"
#: `serve` flags that name one service's setting; `serve all` refuses them.
PER_SERVICE_FLAGS = ("port", "db", "metrics_port", "event_loop")


def refused_flags(args: argparse.Namespace, services: tuple[str, ...]) -> list[str]:
    """The per-service flags given to `serve all` (it takes each from the environment)."""
    names = [f for f in PER_SERVICE_FLAGS if getattr(args, f, None) is not None]
    names += [f"{peer}_addr" for peer in services if getattr(args, f"{peer}_addr", None) is not None]
    return ["--" + n.replace("_", "-") for n in names]


def peer_host(host: str) -> str:
    """The host to reach this process's own services on (a wildcard bind is reached on loopback)."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host in ("::", "[::]"):
        return "[::1]"
    return host


def build_configs(args: argparse.Namespace, build_config: Any) -> dict[str, Any]:
    """Return service -> config, each from its `from_env`, peers set to this process's services.

    AGENTRT_HEALTH_PORT (one setting, read by every service alike) is kept by
    HEALTH_PORT_SERVICE alone: five services cannot bind one port.

    Raises:
        ValueError: a bad `AGENTRT_*` value, a port of 0, or a database URL of another driver.
    """
    first = {name: build_config(name, None, None, args.host, {}) for name in START_ORDER}
    host = peer_host(first["runs"].server.host)
    addresses = {}
    for name, config in first.items():
        if config.server.port == 0:
            raise ValueError(f"AGENTRT_{name.upper()}_PORT is 0: `serve all` needs each service's port fixed")
        addresses[name] = f"{host}:{config.server.port}"
    configs = {}
    for name in START_ORDER:
        config = build_config(name, None, None, args.host, addresses)
        server = apply_server_flags(args, config.server)
        if name != HEALTH_PORT_SERVICE and server.health_port:
            server = dataclasses.replace(server, health_port=0)
        config = dataclasses.replace(config, server=server)
        url = getattr(config, "db_url", "") or config.server.db_url
        problem = check_db_url(url) if url else None
        if problem:
            raise ValueError(f"{name}: {problem}")
        configs[name] = config
    return configs


async def serve_all(configs: dict[str, Any]) -> None:
    """Serve every service in `configs` in this process until SIGTERM/SIGINT, then stop them.

    Raises:
        PortInUseError: a service's port (or metrics port) is taken; those started are stopped.
        StartupError: a service could not start (its store did not answer; a SQLite file
            whose directory cannot be had, the message then opening with the service's
            name); those started are stopped.
    """
    from agentrt.mesh.server import PortInUseError, StartupError
    from agentrt.mesh.storage.sqlite_file import DatabasePathError

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    hosted = LocalCalls()
    started: list[tuple[str, Any]] = []
    try:
        for name in START_ORDER:
            module = importlib.import_module(f"agentrt.{name}.server")
            try:
                if name == "runs":
                    server = module.build_server(configs[name], local=hosted)
                else:
                    server = module.build_server(configs[name])
            except DatabasePathError as exc:  # before it bound anything; the started stop below
                raise StartupError(f"{name}: {exc}") from exc
            try:
                await server.start()
            except PortInUseError as exc:
                exc.service = name  # type: ignore[attr-defined]
                if not getattr(exc, "port", None):
                    exc.port = configs[name].server.port  # type: ignore[attr-defined]
                raise
            started.append((name, server))
            if server.calls is not None:  # a peer the run loop calls every turn
                hosted.host_server(name, server)
        log.info("serving %s in one process", ", ".join(START_ORDER))
        await stop.wait()
    finally:
        await stop_all(started, hosted)


async def stop_all(started: list[tuple[str, Any]], hosted: LocalCalls) -> None:
    """Stop the started services side by side, as five processes drain; runs' peers close after it.

    Every service turns NOT_SERVING and drains its RPCs at once (one drain's time in all, not
    one per service: a drain that outlasted the supervisor's grace got the process SIGKILLed
    mid-drain). What a peer hosts for the run loop outlives runs' drain: the gateway, the
    session store and the task service run their `close` hook (which ends their calls in
    flight) and end their local streams only once runs has stopped, so a model call the drain
    lets finish is answered and logged, and a turn's last writes land. The tool service only
    waits for runs' drain to begin (its runs then abandon their tool calls, which run on,
    journaled): its commands get the drain's time from the SIGTERM, not after runs'.

    Raises:
        Exception: the first error a service's stop raised, once every stop has ended.
    """
    servers = dict(started)
    drain_begun, runs_stopped = asyncio.Event(), asyncio.Event()
    runs = servers.get("runs")
    if runs is None:
        drain_begun.set()
        runs_stopped.set()
    else:
        begin = runs.draining

        async def draining() -> None:
            try:
                if begin is not None:
                    await begin()
            finally:
                drain_begun.set()

        runs.draining = draining

    def after(event: asyncio.Event, close: Any) -> Any:
        async def closing() -> None:
            await event.wait()
            if close is not None:
                await close()

        return closing

    for name, server in servers.items():
        if name != "runs":
            server.close = after(drain_begun if name == "tools" else runs_stopped, server.close)

    async def stop_one(name: str, server: Any) -> None:
        try:
            await server.stop()
        finally:
            hosted.close(name)
            if name == "runs":
                drain_begun.set()
                runs_stopped.set()

    ended = await asyncio.gather(*(stop_one(n, s) for n, s in reversed(started)), return_exceptions=True)
    errors = [e for e in ended if isinstance(e, BaseException)]
    if errors:
        raise errors[0]


def run_serve_all(args: argparse.Namespace, build_config: Any) -> int:
    """`agentrt serve all` (see the module docstring); return the exit status."""
    from agentrt.cli.serve import EXIT_PORT_TAKEN, EXIT_USAGE, SERVICES, event_loop_runner
    from agentrt.mesh.server import PortInUseError, StartupError
    from agentrt.mesh.telemetry import configure_tracing, shutdown_tracing

    refused = refused_flags(args, SERVICES)
    if refused:
        print(
            f"agentrt serve all: {', '.join(refused)} names one service's setting; `serve all` reads each"
            " service's from its AGENTRT_<SVC>_* variables",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        configs = build_configs(args, build_config)
    except ValueError as exc:
        print(f"agentrt serve all: {exc}", file=sys.stderr)
        return EXIT_USAGE
    log.info("starting %s in one process (event loop: asyncio)", ", ".join(START_ORDER))
    try:
        configure_tracing(args.tracing, "agentrt", set_global=True)
        with event_loop_runner("asyncio") as runner:
            runner.run(serve_all(configs))
    except PortInUseError as exc:
        service = getattr(exc, "service", "?")
        print(
            f"agentrt serve all: port {getattr(exc, 'port', '?')} of {service} is taken ({exc})",
            file=sys.stderr,
        )
        return EXIT_PORT_TAKEN
    except StartupError as exc:
        print(f"agentrt serve all: cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        shutdown_tracing()
    log.info("all services stopped")
    return 0
