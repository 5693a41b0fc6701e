"""`agentrt demo`: the main job in one command, offline.

Starts the mesh with `start_mesh` in a fresh temporary state dir on free ports (so it never
collides with a running `agentrt up`), runs the CLI's agent with the local model on a small
task in a fresh workspace, prints the live run, the result and the workspace, stops the
mesh and prints the total time and the time of each model call. Exit 0 when the run completed.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import grpc
from rich.console import Console
from rich.markup import escape

from agentrt.cli.ports import free_ports
from agentrt.cli.run import (
    build_agent,
    follow_run,
    parse_model,
    print_outcome,
    terminal_approver,
    workspace_listing,
)
from agentrt.cli.serve import SERVICES
from agentrt.cli.supervise import print_mesh
from agentrt.cli.up import MeshStartError, start_mesh
from agentrt.client.channels import MeshClient
from agentrt.v1 import run_service_pb2

#: The sample task: one the 135M local model completes (it writes a greeting of its own choosing).
DEMO_TASK = "Create a file named hello.txt containing a greeting, then answer done."


def add_parser(subparsers: Any) -> None:
    """Register the `demo` subcommand."""
    p = subparsers.add_parser(
        "demo",
        help="start the mesh, run an agent with the local model on a sample task, stop the mesh",
        description="Offline demo: the whole mesh, the local model, one run, live.",
    )
    p.add_argument("--task", default=DEMO_TASK, help="the task (default: %(default)s)")
    p.add_argument("--model", default="local", help="PROVIDER:MODEL (default local)")
    p.add_argument("--max-turns", type=int, default=6, help="turns before the run fails (default 6)")
    p.add_argument("--keep", action="store_true", help="keep the temporary state dir and workspace")
    p.set_defaults(func=run_demo)


def model_call_seconds(events: list[run_service_pb2.RunEvent]) -> list[float]:
    """Return the wall time of each model call in seconds, in call order.

    A call spans turn_started (or run_resumed) up to model_responded, by event timestamps.
    """
    spans, start = [], None
    for event in events:
        kind = event.WhichOneof("payload")
        when = event.time.seconds + event.time.nanos / 1e9
        if kind in ("turn_started", "run_resumed"):
            start = when
        elif kind == "model_responded" and start is not None:
            spans.append(max(0.0, when - start))
            start = None
    return spans


def run_demo(args: argparse.Namespace) -> int:
    """Run the demo; return 0 when the run completed, 1 otherwise (2 for a bad --model)."""
    console = Console()
    began = time.monotonic()
    try:
        model = parse_model(args.model)
    except ValueError as exc:
        console.print(f"agentrt demo: {escape(str(exc))}")
        return 2
    root = Path(tempfile.mkdtemp(prefix="agentrt-demo-"))
    workspace = root / "workspace"  # made by the tool service (as root, owned by the sandbox user)
    console.rule("agentrt demo")
    console.print(f"task: {escape(args.task)}")
    console.print(f"state dir {root / 'state'} · workspace {workspace}")
    try:
        try:
            with console.status("starting the mesh (5 processes; the gateway loads the local model)…"):
                mesh = start_mesh(
                    root / "state", ports=dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))
                )
        except MeshStartError as exc:
            console.print(f"[bold red]the mesh did not start:[/] {escape(str(exc))}")
            for line in exc.log_tail:
                console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
            return 1
        ready = time.monotonic() - began
        print_mesh(console, mesh, title=f"mesh ready in {ready:.1f} s")
        try:
            request = run_service_pb2.StartRunRequest(
                agent=build_agent(model, args.max_turns),
                input=args.task,
                workspace=str(workspace),
            )
            outcome = asyncio.run(_follow(mesh.addresses["runs"], request, console))
        except (grpc.aio.AioRpcError, RuntimeError) as exc:
            detail = (
                f"{exc.code().name}: {exc.details()}" if isinstance(exc, grpc.aio.AioRpcError) else str(exc)
            )
            console.print(f"[bold red]the run could not be followed:[/] {escape(detail)}")
            return 1
        except KeyboardInterrupt:
            console.print("interrupted")
            return 130
        finally:
            with console.status("stopping the mesh…"):
                mesh.stop()
        console.rule("result")
        print_outcome(console, outcome.run)
        _print_workspace(console, workspace)
        calls = model_call_seconds(outcome.events)
        if calls:
            console.print(
                f"model calls: {len(calls)}, {sum(calls) / len(calls):.2f} s on average "
                f"(min {min(calls):.2f} s, max {max(calls):.2f} s)"
            )
        console.print(f"total time {time.monotonic() - began:.1f} s (mesh start {ready:.1f} s)")
        return 0 if outcome.completed else 1
    finally:
        if args.keep:
            console.print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


async def _follow(runs_addr: str, request: run_service_pb2.StartRunRequest, console: Console) -> Any:
    client = MeshClient(runs=runs_addr)
    try:
        return await follow_run(client, request, console, terminal_approver(console, True, False))
    finally:
        await client.close()


def _print_workspace(console: Console, workspace: Path) -> None:
    listing = workspace_listing(workspace)
    console.print(f"workspace {workspace}: {len(listing)} file(s)")
    for line in listing:
        console.print(f"  {escape(line)}", highlight=False, soft_wrap=True)
    for path in sorted(workspace.rglob("*"))[:5]:
        if path.is_file() and path.stat().st_size <= 2000:
            text = path.read_text("utf-8", "replace").rstrip("\n")
            console.print(
                f"  [dim]{escape(str(path.relative_to(workspace)))}:[/] {escape(text)}", highlight=False
            )
