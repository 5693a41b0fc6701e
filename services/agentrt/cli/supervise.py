"""`agentrt up`: start the mesh, print where each service listens, supervise it in the foreground.

It prints each service's gRPC address, its Prometheus endpoint and its pid (with
`--one-process`: the five in one `agentrt serve all` process, so every row shows its pid,
and its one log is `logs/all.log`). The supervisor never hangs: it returns 0 after
Ctrl-C/SIGTERM has stopped every child, 2 for a malformed AGENTRT_<SVC>_METRICS_PORT, and
non-zero when a port is taken (naming the port and the service), when the mesh does not
start (naming the service and showing its log), or when a child dies on its own (then it
names it, shows its exit status and the last lines of its log, and stops the rest).
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from types import FrameType
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from agentrt.cli.args import MAX_BASE_PORT, base_port
from agentrt.cli.ports import ports_from_base
from agentrt.cli.up import ChildExit, Mesh, MeshStartError, PortTakenError, start_mesh
from agentrt.mesh.config import env

EXIT_START_FAILED = 1
EXIT_USAGE = 2
EXIT_CHILD_DIED = 3


def add_parser(subparsers: Any) -> None:
    """Register the `up` subcommand."""
    p = subparsers.add_parser(
        "up",
        help="start all five services on this machine and supervise them",
        description=(
            "Start runs, gateway, tools, sessions and tasks as separate processes (one with "
            "--one-process) on 127.0.0.1 with the embedded defaults (SQLite under the state dir, the "
            "local sandbox, the local model). Ctrl-C stops them all."
        ),
    )
    p.add_argument(
        "--state-dir", default=None, help="state directory (default AGENTRT_STATE_DIR or ./.agentrt)"
    )
    p.add_argument(
        "--base-port",
        type=base_port,
        default=None,
        help="first of five consecutive ports: runs, gateway, tools, sessions, tasks; "
        f"1..{MAX_BASE_PORT} (default 50051..50055)",
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1)")
    p.add_argument(
        "--one-process",
        action="store_true",
        help="run the five in one process (`agentrt serve all`), each still on its own port; "
        "the run loop calls its gateway, tools and sessions without the wire",
    )
    p.set_defaults(func=run_up)


def mesh_table(mesh: Mesh, title: str = "agentrt mesh") -> Table:
    """Return a rich table of service, address, metrics endpoint and pid."""
    table = Table(title=title)
    table.add_column("service", no_wrap=True)
    table.add_column("address", no_wrap=True)
    table.add_column("metrics", no_wrap=True)
    table.add_column("pid", justify="right", no_wrap=True)
    metrics = mesh.metrics_urls
    for name, address in mesh.addresses.items():
        table.add_row(name, address, metrics[name] or "-", str(mesh.pids[name]))
    return table


def print_mesh(console: Console, mesh: Mesh, title: str = "agentrt mesh") -> None:
    """Print the mesh table and where the services log."""
    console.print(mesh_table(mesh, title))
    logs = set(mesh.log_paths.values())
    where = str(logs.pop()) if len(logs) == 1 else f"{mesh.state_dir / 'logs'}/<service>.log"
    console.print(f"logs: {escape(where)}", highlight=False, soft_wrap=True)


def report_exit(console: Console, gone: ChildExit) -> None:
    """Print which service ended, how, and the last lines of its log."""
    what = "the process of the five services" if gone.name == "all" else f"the {gone.name} service"
    console.print(f"[bold red]agentrt up: {escape(what)} stopped:[/] {escape(gone.describe())}")
    if gone.log_tail:
        console.print("[dim]last lines of its log:[/]")
        for line in gone.log_tail:
            console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def run_up(args: argparse.Namespace) -> int:
    """Start and supervise the mesh; return the exit status (see the module docstring)."""
    console = Console(stderr=False)
    errors = Console(stderr=True)
    state_dir = args.state_dir or env("STATE_DIR", ".agentrt")
    # SIGTERM behaves like Ctrl-C, including while the mesh is still starting; SIGINT is
    # installed explicitly because a shell starts background jobs with it ignored.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    signal.signal(signal.SIGINT, _raise_interrupt)
    started = time.monotonic()
    try:
        with console.status("starting the mesh (waiting for every health check)…"):
            mesh = start_mesh(
                state_dir,
                host=args.host,
                ports=ports_from_base(args.base_port),
                one_process=args.one_process,
            )
    except PortTakenError as exc:
        errors.print(f"[bold red]agentrt up: refusing to start:[/] {escape(str(exc))}")
        errors.print("stop whatever listens there, or pick other ports with --base-port N")
        return EXIT_START_FAILED
    except MeshStartError as exc:
        errors.print(f"[bold red]agentrt up: the mesh did not start:[/] {escape(str(exc))}")
        for line in exc.log_tail:
            errors.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
        return EXIT_START_FAILED
    except ValueError as exc:  # a malformed AGENTRT_<SVC>_METRICS_PORT
        errors.print(f"[bold red]agentrt up:[/] {escape(str(exc))}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        errors.print("agentrt up: interrupted while starting; stopped")
        return 0
    try:
        print_mesh(console, mesh)
        console.print(
            f"ready in {time.monotonic() - started:.1f} s · state in {mesh.state_dir} · "
            f'try: agentrt run "list the files" --runs-addr {mesh.addresses["runs"]} · Ctrl-C stops'
        )
        sys.stdout.flush()
        # Written once the table is out: a script may wait for this file as the ready signal.
        mesh.write_manifest()
        gone = mesh.wait_exit()
    except KeyboardInterrupt:
        gone = None
    return _stop(mesh, gone, console, errors)


def _stop(mesh: Mesh, gone: ChildExit | None, console: Console, errors: Console) -> int:
    # A second Ctrl-C must not abandon children half-stopped.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if gone is not None:
        report_exit(errors, gone)
        if gone.name != "all":  # `serve all`: nothing else is left to stop
            errors.print("stopping the other services…")
        mesh.stop()
        return EXIT_CHILD_DIED
    console.print("stopping the mesh…")
    codes = mesh.stop()
    console.print("stopped: " + ", ".join(f"{n} ({c})" for n, c in codes.items()))
    return 0
