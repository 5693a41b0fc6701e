"""`agentrt serve <service>`: run one service of the mesh in this process.

Owns the process edge of a service: it turns flags into the service's config (flags win,
`AGENTRT_*` variables are the fallback, read by each service's `config.from_env`), sets up
logging on stderr (text, or JSON lines with `--log-format json` / AGENTRT_LOG_FORMAT) and
tracing (the standard OTEL_* variables, `mesh.config.tracing_from_env`; off unless asked),
and runs `serve(config)` until SIGTERM/SIGINT drains it, then flushes the last spans.
The event loop is uvloop's by default (`--event-loop` / AGENTRT_EVENT_LOOP: `uvloop` or
`asyncio`): the services spend much of a turn in the loop's own work, which uvloop does in C
(docs/decisions/0023-hot-path-redesign.md). The tools service always runs on asyncio's own
loop: its sandboxes start processes (bubblewrap with passed fds, pidfds, ptys), and under
uvloop's process spawning a sandboxed command crashed (SIGSEGV, exit 139); `--event-loop
uvloop` on it is a usage error, and AGENTRT_EVENT_LOOP does not apply to it.

Exit status: 0 after a clean drain; `EXIT_PORT_TAKEN` (98, like EADDRINUSE) when the port
cannot be bound, so `agentrt up` can tell a taken port from a crash; 2 for a bad flag or
`AGENTRT_*` value (a port outside 1..65535, a database URL of another driver, a TLS or
token file that cannot be read or parsed); 1 on any other startup failure (a store that does
not answer, a SQLite file whose directory cannot be created or written), one line
"agentrt serve <svc>: cannot start: ...", no traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import dataclasses
import importlib
import logging
import os
import signal
import sys
from typing import Any

from agentrt.cli.args import check_db_url, db_url, metrics_port, port_number
from agentrt.cli.tls import add_server_flags, apply_server_flags
from agentrt.mesh.config import env, logging_from_env, tracing_from_env
from agentrt.mesh.telemetry import configure_tracing, shutdown_tracing
from agentrt.mesh.telemetry.logs import FORMATS, LogConfig, setup_logging

#: The five services, in the order `agentrt up` lists them.
SERVICES = ("runs", "gateway", "tools", "sessions", "tasks")

#: Peers each service calls; each becomes a `--<peer>-addr` flag (AGENTRT_<PEER>_ADDR fallback).
PEERS: dict[str, tuple[str, ...]] = {
    "runs": ("gateway", "tools", "sessions", "tasks"),
    "gateway": (),
    "tools": ("tasks",),
    "sessions": (),
    "tasks": ("runs", "sessions"),
}

#: Config class of each service, as "module:ClassName".
CONFIGS = {
    "runs": "agentrt.runs.config:RunsConfig",
    "gateway": "agentrt.gateway.config:GatewayConfig",
    "tools": "agentrt.tools.config:ToolsConfig",
    "sessions": "agentrt.sessions.config:SessionsConfig",
    "tasks": "agentrt.tasks.config:TasksConfig",
}

#: Event loop implementations `serve` can run on; the first is the default.
EVENT_LOOPS = ("uvloop", "asyncio")
#: Services that always run on asyncio's own loop (see the module docstring).
ASYNCIO_ONLY = ("tools",)

EXIT_PORT_TAKEN = 98
EXIT_USAGE = 2

log = logging.getLogger("agentrt.cli")


def add_parser(subparsers: Any) -> None:
    """Register the `serve` subcommand on an argparse subparsers object."""
    p = subparsers.add_parser(
        "serve",
        help="run one service of the mesh in the foreground",
        description="Run one service; SIGTERM or Ctrl-C drains in-flight calls and exits 0.",
    )
    p.add_argument(
        "service",
        choices=(*SERVICES, "all"),
        help="which service to run; all = the five in this one process (cli/serve_all.py)",
    )
    p.add_argument(
        "--port",
        type=port_number,
        default=None,
        help="TCP port, 1..65535 (default AGENTRT_<SVC>_PORT or the service's)",
    )
    p.add_argument("--host", default=None, help="interface to bind (default AGENTRT_HOST or 127.0.0.1)")
    p.add_argument(
        "--db",
        type=db_url,
        default=None,
        metavar="URL",
        help="sqlite+aiosqlite:///FILE or postgresql+asyncpg://… (default SQLite in the state dir)",
    )
    for peer in SERVICES:
        p.add_argument(
            f"--{peer}-addr",
            default=None,
            metavar="HOST:PORT",
            help=f"address of the {peer} service (default AGENTRT_{peer.upper()}_ADDR)",
        )
    p.add_argument(
        "--metrics-port",
        type=metrics_port,
        default=None,
        help="serve Prometheus /metrics on this port, 0 = none (default AGENTRT_<SVC>_METRICS_PORT, 0)",
    )
    p.add_argument(
        "--log-format",
        choices=FORMATS,
        default=None,
        help="text lines or one JSON object per line (default AGENTRT_LOG_FORMAT, text)",
    )
    p.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default=None,
        help="the event loop implementation (default AGENTRT_EVENT_LOOP, uvloop; tools: asyncio only)",
    )
    add_server_flags(p)
    p.set_defaults(func=run_serve)


def build_config(
    service: str, port: int | None, db_url: str | None, host: str | None, peers: dict[str, str]
) -> Any:
    """Return the service's config: its `from_env` with the given flags, then the host override.

    Args:
        service: one of SERVICES.
        port: the port flag, None for the env/default.
        db_url: the --db flag, None for the env/default.
        host: the --host flag, None for the env/default.
        peers: peer name -> "host:port" from flags (only names in PEERS[service] are passed).

    Raises:
        ImportError: the service package is not importable.
        ValueError: a bad `AGENTRT_*` value, e.g. an `AGENTRT_<SVC>_PORT` outside 0..65535
            (gRPC would bind it modulo 65536, a port nobody asked for).
    """
    module_name, class_name = CONFIGS[service].split(":")
    config_cls = getattr(importlib.import_module(module_name), class_name)
    kwargs = {name: peers[name] for name in PEERS[service] if peers.get(name)}
    config = config_cls.from_env(port=port, db_url=db_url, **kwargs)
    if not 0 <= config.server.port <= 65535:
        raise ValueError(f"AGENTRT_{service.upper()}_PORT={config.server.port} is outside 0..65535")
    if host:
        config = dataclasses.replace(config, server=dataclasses.replace(config.server, host=host))
    return config


def _die_with_supervisor(supervisor_pid: str) -> None:
    """Ask Linux for SIGTERM when the `agentrt up` that started us dies (PR_SET_PDEATHSIG).

    A supervisor killed outright (SIGKILL, a crash) then leaves no orphaned service. If it
    already died before the request was made, exit at once.
    """
    if not supervisor_pid or not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if str(os.getppid()) != supervisor_pid:
        raise SystemExit(f"agentrt serve: the supervisor (pid {supervisor_pid}) is gone")


def event_loop_runner(name: str) -> asyncio.Runner:
    """Return an asyncio.Runner on the named event loop implementation (one of EVENT_LOOPS).

    Raises:
        ValueError: a name that is not one of EVENT_LOOPS.
    """
    if name == "uvloop":
        import uvloop

        return asyncio.Runner(loop_factory=uvloop.new_event_loop)
    if name == "asyncio":
        return asyncio.Runner()
    raise ValueError(f"AGENTRT_EVENT_LOOP must be one of {', '.join(EVENT_LOOPS)}, not {name!r}")


def with_metrics_port(config: Any, port: int | None) -> Any:
    """Return config with the `--metrics-port` flag applied (None leaves it as configured).

    Every service, the gateway included, keeps it in `server.metrics_port`.
    """
    if port is None:
        return config
    return dataclasses.replace(config, server=dataclasses.replace(config.server, metrics_port=port))


def run_serve(args: argparse.Namespace) -> int:
    """Serve `args.service` until drained; return the exit status (see the module docstring)."""
    from agentrt.mesh.server import PortInUseError, StartupError
    from agentrt.mesh.storage.sqlite_file import DatabasePathError

    _die_with_supervisor(env("SUPERVISOR_PID", ""))
    try:
        logs = logging_from_env()
        tracing = tracing_from_env()
    except ValueError as exc:
        print(f"agentrt serve {args.service}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.log_format:
        logs = LogConfig(level=logs.level, format=args.log_format, content=logs.content)
    setup_logging(args.service, logs)
    if args.service == "all":
        from agentrt.cli.serve_all import run_serve_all

        args.tracing = tracing
        return run_serve_all(args, build_config)
    loop_name = args.event_loop or env("EVENT_LOOP", EVENT_LOOPS[0])
    if loop_name not in EVENT_LOOPS:
        print(
            f"agentrt serve {args.service}: AGENTRT_EVENT_LOOP must be one of {', '.join(EVENT_LOOPS)},"
            f" not {loop_name!r}",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.service in ASYNCIO_ONLY:
        if args.event_loop not in (None, "asyncio"):
            print(
                f"agentrt serve {args.service}: the {args.service} service runs on the asyncio event loop"
                " only (its sandboxes start processes uvloop cannot)",
                file=sys.stderr,
            )
            return EXIT_USAGE
        loop_name = "asyncio"
    peers = {name: getattr(args, f"{name}_addr") for name in SERVICES}
    try:
        config = build_config(args.service, args.port, args.db, args.host, peers)
        config = dataclasses.replace(config, server=apply_server_flags(args, config.server))
        config = with_metrics_port(config, args.metrics_port)
    except ValueError as exc:
        # A bad AGENTRT_* value (config validation): a usage error, not a crash.
        print(f"agentrt serve {args.service}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    # The URL may come from AGENTRT_<SVC>_DB, which the flag check did not see.
    url = getattr(config, "db_url", "") or config.server.db_url
    problem = check_db_url(url) if url else None
    if problem:
        print(f"agentrt serve {args.service}: {problem}", file=sys.stderr)
        return EXIT_USAGE
    server_module = importlib.import_module(f"agentrt.{args.service}.server")
    address = config.server.address
    log.info("starting %s on %s (event loop: %s)", args.service, address, loop_name)
    try:
        configure_tracing(tracing, args.service, set_global=True)
        with event_loop_runner(loop_name) as runner:
            runner.run(server_module.serve(config))
    except PortInUseError as exc:
        # A service's second port (its /metrics) names itself on the error.
        port = getattr(exc, "port", None) or config.server.port
        print(f"agentrt serve {args.service}: port {port} is taken ({exc})", file=sys.stderr)
        return EXIT_PORT_TAKEN
    except (StartupError, DatabasePathError) as exc:
        # DatabasePathError: a SQLite file whose directory cannot be had, met while the
        # service is built (before it binds anything); its message names the file.
        print(f"agentrt serve {args.service}: cannot start: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        # serve() handles SIGINT itself; this only catches one that lands before it installs.
        return 0
    finally:
        shutdown_tracing()
    log.info("%s stopped", args.service)
    return 0
