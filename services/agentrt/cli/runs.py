"""`agentrt runs`, `agentrt runs show RUN`, `agentrt approve RUN` and `agentrt stop RUN --after-turn`.

Operator commands over the existing RunService RPCs (ListRuns, GetRun, ResumeRun,
StopAfterTurn), one line per fact so a script can read them:

- `runs [--session ID] [--limit N]`: the tenant's runs, newest first (ListRuns, paged).
- `runs show RUN`: the record (status, phase, agent, session, turns, usage, output or
  failure, parent and child runs) and, for a suspended run, every pending call with what it
  waits for and its exact arguments.
- `approve RUN [--deny CALL]... [--reason TEXT]`: answers every call of a suspended run that
  waits for an approval: approved, except the `--deny` ones, which the model is told were
  denied (with `--reason`). Calls waiting for a client's result are not the CLI's to answer;
  the run keeps waiting for them. Calls waiting for a reconciliation are answered one by one
  with `agentrt reconcile` (cli/reconcile.py), which shares this module's client helpers.
- `stop RUN --after-turn [--reason TEXT]`: asks the run to finish at its next save point
  (004 §2.3c). A server that does not offer it yet is said so plainly.

Exit status: 0 done; 1 the run is not in a state for it (not suspended, nothing to approve,
already finished); 2 bad flags or a call id that is not pending; 3 the server does not
support the request yet; 4 the mesh was unreachable or refused the request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import grpc
from rich.console import Console
from rich.markup import escape

from agentrt.cli.render import phase_name, status_name, visible
from agentrt.client.channels import MeshClient
from agentrt.mesh.config import DEFAULT_PORTS, env
from agentrt.mesh.status import reason_of
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

EXIT_STATE = 1
EXIT_USAGE = 2
EXIT_UNSUPPORTED = 3
EXIT_UNREACHABLE = 4
#: Runs listed by default; ListRuns pages are at most 1,000.
DEFAULT_LIMIT = 20
MAX_LIMIT = 1000
#: What a pending call waits for, by PendingCallKind, as the operator commands print it.
PENDING_KINDS = {
    pb.PENDING_CALL_KIND_APPROVAL: "approval",
    pb.PENDING_CALL_KIND_EXTERNAL_RESULT: "client result",
    # a call with side effects whose outcome is unknown (the tool service stopped while it ran)
    pb.PENDING_CALL_KIND_RECONCILIATION: "reconciliation",
}
#: Characters of a pending call's arguments shown by `runs show` (the rest is marked).
ARGS_CHARS = 2000


def _limit(text: str) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not 1 <= value <= MAX_LIMIT:
        raise argparse.ArgumentTypeError(f"--limit {value} is outside 1..{MAX_LIMIT}")
    return value


def add_runs_addr(p: argparse.ArgumentParser, default: Any = None) -> None:
    """Add `--runs-addr HOST:PORT` to a subcommand (default: the RunService from the environment)."""
    p.add_argument(
        "--runs-addr",
        default=default,
        help="RunService address (default AGENTRT_RUNS_ADDR or 127.0.0.1:50051)",
    )


def add_parsers(subparsers: Any) -> None:
    """Register the `runs`, `approve` and `stop` subcommands."""
    runs = subparsers.add_parser("runs", help="list runs, or show one with its pending calls")
    add_runs_addr(runs)
    runs.add_argument("--session", default="", help="only the runs of this session")
    runs.add_argument(
        "--limit", type=_limit, default=DEFAULT_LIMIT, help=f"runs to list (default {DEFAULT_LIMIT})"
    )
    inner = runs.add_subparsers(dest="runs_command", metavar="show")
    show = inner.add_parser("show", help="show a run's record and its pending calls")
    show.add_argument("run_id", metavar="RUN")
    add_runs_addr(show, argparse.SUPPRESS)  # not to overwrite `runs --runs-addr A show RUN`
    runs.set_defaults(func=runs_command)

    approve = subparsers.add_parser("approve", help="answer the approvals a suspended run waits for")
    approve.add_argument("run_id", metavar="RUN")
    approve.add_argument(
        "--deny",
        action="append",
        default=[],
        metavar="CALL",
        help="deny this call (repeatable); others are approved",
    )
    approve.add_argument("--reason", default="", help="why the denied calls are denied (the model reads it)")
    add_runs_addr(approve)
    approve.set_defaults(func=approve_command)

    stop = subparsers.add_parser("stop", help="ask a run to finish at its next save point")
    stop.add_argument("run_id", metavar="RUN")
    stop.add_argument(
        "--after-turn", action="store_true", help="finish once the turn in flight is saved (required)"
    )
    stop.add_argument("--reason", default="", help="why, for the record")
    add_runs_addr(stop)
    stop.set_defaults(func=stop_command)


def error_console() -> Console:
    """Return the console of refusals and errors (standard error, no markup highlighting)."""
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _client(args: argparse.Namespace) -> MeshClient:
    addr = args.runs_addr or env("RUNS_ADDR", f"127.0.0.1:{DEFAULT_PORTS['runs']}")
    return MeshClient(runs=addr, token=env("AUTH_TOKEN", ""), tenant=env("TENANT", ""))


def with_client(args: argparse.Namespace, body: Callable[[MeshClient, Console], Awaitable[int]]) -> int:
    """Run `body` with a RunService client (from `--runs-addr`) and the output console; return its status.

    A gRPC failure `body` lets through is printed (status, reason, details) and is EXIT_UNREACHABLE.
    """
    console, errors = Console(soft_wrap=True, highlight=False), error_console()

    async def main() -> int:
        client = _client(args)
        try:
            return await body(client, console)
        except grpc.aio.AioRpcError as exc:
            return _rpc_failed(errors, exc)
        finally:
            await client.close()

    return asyncio.run(main())


def _rpc_failed(errors: Console, exc: grpc.aio.AioRpcError) -> int:
    reason = reason_of(exc)
    errors.print(
        f"[bold red]agentrt:[/] {exc.code().name}"
        + (f" {reason}" if reason else "")
        + f": {escape(exc.details() or '')}"
    )
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        errors.print("is the mesh running? start it with `agentrt up`")
    return EXIT_UNREACHABLE


def runs_command(args: argparse.Namespace) -> int:
    """Run `agentrt runs` / `agentrt runs show RUN`; return the exit status."""
    if args.runs_command == "show":
        return with_client(args, lambda client, console: show_run(client, console, args.run_id))
    return with_client(args, lambda client, console: list_runs(client, console, args.session, args.limit))


def approve_command(args: argparse.Namespace) -> int:
    """Run `agentrt approve RUN`; return the exit status."""
    if args.reason and not args.deny:
        error_console().print("agentrt approve: --reason explains denials; name them with --deny CALL")
        return EXIT_USAGE
    return with_client(
        args, lambda client, console: approve_run(client, console, args.run_id, args.deny, args.reason)
    )


def stop_command(args: argparse.Namespace) -> int:
    """Run `agentrt stop RUN --after-turn`; return the exit status."""
    if not args.after_turn:
        error_console().print(
            "agentrt stop: say --after-turn (the run finishes once its current turn is saved); "
            "it is the only way this command stops a run"
        )
        return EXIT_USAGE
    return with_client(args, lambda client, console: stop_run(client, console, args.run_id, args.reason))


def _usage(u: cpb.Usage) -> str:
    return f"{u.input_tokens} in / {u.output_tokens} out tokens, {u.requests} model calls"


def _time(run: pb.Run) -> str:
    return run.update_time.ToDatetime().strftime("%Y-%m-%d %H:%M:%S") if run.HasField("update_time") else "-"


async def list_runs(
    client: MeshClient, console: Console, session_id: str = "", limit: int = DEFAULT_LIMIT
) -> int:
    """Print up to `limit` runs, newest first, one line each; return 0.

    Raises:
        grpc.aio.AioRpcError: ListRuns failed.
    """
    shown, token = 0, ""
    while shown < limit:
        page = await client.run_service.ListRuns(
            pb.ListRunsRequest(
                session_id=session_id, page_size=min(limit - shown, MAX_LIMIT), page_token=token
            )
        )
        for run in page.runs:
            waits = f" · {len(run.pending_calls)} pending" if run.pending_calls else ""
            agent = run.current_agent_name or run.agent_name
            console.print(
                f"{escape(run.run_id)}  {status_name(run.status):<9}  agent {escape(agent)}"
                f"  turns {run.turns}  session {escape(run.session_id)}  updated {_time(run)}{waits}"
            )
        shown += len(page.runs)
        token = page.next_page_token
        if not token or not page.runs:
            break
    if shown == 0:
        console.print("no runs" + (f" in session {escape(session_id)}" if session_id else ""))
    return 0


def pending_lines(calls: Sequence[pb.PendingCall]) -> list[str]:
    """Return one line per pending call: id, tool, what it waits for, (child run), exact arguments."""
    out = []
    for p in calls:
        args = p.call.arguments or p.call.invalid_arguments or "{}"
        if len(args) > ARGS_CHARS:
            args = args[:ARGS_CHARS] + f" … ({len(args) - ARGS_CHARS} more characters)"
        child = f"  in child run {p.run_id}" if p.run_id else ""
        kind = PENDING_KINDS.get(p.kind, "unknown")
        why = f" ({p.reason})" if p.reason and p.kind == pb.PENDING_CALL_KIND_RECONCILIATION else ""
        out.append(f"  {p.call.call_id}  {p.call.name}  waits for {kind}{why}{child}  arguments {args}")
    return out


async def show_run(client: MeshClient, console: Console, run_id: str) -> int:
    """Print a run's record and its pending calls; return 0.

    Raises:
        grpc.aio.AioRpcError: GetRun failed (e.g. NOT_FOUND/RUN_NOT_FOUND).
    """
    run = (await client.run_service.GetRun(pb.GetRunRequest(run_id=run_id))).run
    lines = [
        f"run {run.run_id}",
        f"status {status_name(run.status)} · phase {phase_name(run.phase)}",
        f"agent {run.agent_name} v{run.agent_version}",
        f"session {run.session_id}",
        f"turns {run.turns} · usage {_usage(run.usage)}",
    ]
    if run.current_agent_name and run.current_agent_name != run.agent_name:
        lines.append(f"current agent {run.current_agent_name} v{run.current_agent_version} (after a handoff)")
    if run.nested_usage.requests:
        lines.append(f"nested usage {_usage(run.nested_usage)}")
    if run.workspace:
        lines.append(f"workspace {run.workspace}")
    if run.sandbox_id:
        ended = run.status in (cpb.RUN_STATUS_COMPLETED, cpb.RUN_STATUS_FAILED, cpb.RUN_STATUS_CANCELED)
        lines.append(f"sandbox {run.sandbox_id}" + (" (released when the run ended)" if ended else ""))
    if run.parent_run_id:
        lines.append(f"parent run {run.parent_run_id} (call {run.parent_call_id})")
    lines += [f"child run {child}" for child in run.child_run_ids]
    if run.labels:
        lines.append("labels " + json.dumps(dict(run.labels), sort_keys=True))
    if run.status == cpb.RUN_STATUS_COMPLETED:
        lines.append(f"final output {run.final_output}")
    if run.status == cpb.RUN_STATUS_FAILED:
        f = run.failure
        lines.append(f"failure kind={f.kind} retryable={str(f.retryable).lower()} message={f.message}")
    if run.pending_calls:
        lines.append(f"pending calls ({len(run.pending_calls)}):")
        lines += pending_lines(run.pending_calls)
    for line in lines:
        console.print(escape(visible(line)))
    return 0


async def approve_run(
    client: MeshClient, console: Console, run_id: str, deny: Sequence[str] = (), reason: str = ""
) -> int:
    """Approve every call a suspended run waits to have approved, except `deny`; return the exit status.

    Returns:
        0 once ResumeRun accepted the decisions; EXIT_STATE when the run is not suspended
        or nothing waits for an approval; EXIT_USAGE when a `deny` id is not such a call.

    Raises:
        grpc.aio.AioRpcError: GetRun or ResumeRun failed for another reason.
    """
    run = (await client.run_service.GetRun(pb.GetRunRequest(run_id=run_id))).run
    errors = error_console()
    if run.status != cpb.RUN_STATUS_SUSPENDED:
        errors.print(f"run {escape(run_id)} is {status_name(run.status)}, not suspended: nothing to approve")
        return EXIT_STATE
    waiting = [p for p in run.pending_calls if p.kind == pb.PENDING_CALL_KIND_APPROVAL]
    others = [p for p in run.pending_calls if p.kind != pb.PENDING_CALL_KIND_APPROVAL]
    ids = [p.call.call_id for p in waiting]
    unknown = [c for c in deny if c not in ids]
    if unknown:
        listed = ", ".join(ids) or "none"
        errors.print(
            f"agentrt approve: {escape(', '.join(unknown))} not waiting for approval on run {escape(run_id)} "
            f"(waiting: {escape(listed)})"
        )
        return EXIT_USAGE
    if not waiting:
        errors.print(f"run {escape(run_id)} has no call waiting for approval; {_others(run_id, others)}")
        return EXIT_STATE
    denied = set(deny)
    decisions = [
        pb.ApprovalDecision(
            call_id=p.call.call_id,
            approved=p.call.call_id not in denied,
            message=reason if p.call.call_id in denied else "",
        )
        for p in waiting
    ]
    if await resume(client, errors, pb.ResumeRunRequest(run_id=run_id, decisions=decisions)) is None:
        return EXIT_STATE
    for p in waiting:
        verdict = "denied" if p.call.call_id in denied else "approved"
        why = f" ({reason})" if verdict == "denied" and reason else ""
        console.print(escape(f"{verdict} {p.call.call_id} {p.call.name}{why}"))
    if others:
        console.print(escape(f"still waiting: {_others(run_id, others)}"))
    return 0


async def resume(
    client: MeshClient, errors: Console, req: pb.ResumeRunRequest
) -> pb.ResumeRunResponse | None:
    """Send ResumeRun; None (said on `errors`) when the run was answered or ended meanwhile.

    Raises:
        grpc.aio.AioRpcError: any other refusal (the command prints it, `with_client`).
    """
    try:
        return await client.run_service.ResumeRun(req)
    except grpc.aio.AioRpcError as exc:
        if reason_of(exc) in ("RUN_NOT_SUSPENDED", "RUN_FINISHED"):
            errors.print(
                f"run {escape(req.run_id)} was answered or ended meanwhile: {escape(exc.details() or '')}"
            )
            return None
        raise


def _others(run_id: str, calls: Sequence[pb.PendingCall]) -> str:
    """Say what the calls approve leaves alone wait for, and who answers them."""

    def ids(kind: int) -> str:
        named = [p.call.call_id for p in calls if p.kind == kind]
        return ", ".join(named) + (" waits" if len(named) == 1 else " wait") if named else ""

    parts = []
    if external := ids(pb.PENDING_CALL_KIND_EXTERNAL_RESULT):
        parts.append(f"{external} for a client's result, which only that client can give")
    if reconcile := ids(pb.PENDING_CALL_KIND_RECONCILIATION):
        parts.append(
            f"{reconcile} for a reconciliation: answer with "
            f"`agentrt reconcile {run_id} CALL --run-again|--fail MESSAGE|--result TEXT`"
        )
    return escape("; ".join(parts))


async def stop_run(client: MeshClient, console: Console, run_id: str, reason: str = "") -> int:
    """Ask a run to finish at its next save point (StopAfterTurn); return the exit status.

    Returns:
        0 accepted; EXIT_STATE the run has finished; EXIT_UNSUPPORTED the server answered
        UNIMPLEMENTED (it does not offer StopAfterTurn yet).

    Raises:
        grpc.aio.AioRpcError: any other failure (NOT_FOUND, INVALID_ARGUMENT, UNAVAILABLE).
    """
    errors = error_console()
    try:
        resp = await client.run_service.StopAfterTurn(pb.StopAfterTurnRequest(run_id=run_id, reason=reason))
    except grpc.aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
            errors.print(
                f"agentrt stop: stopping a run after its turn is not supported by this server yet "
                f"({escape(exc.details() or 'UNIMPLEMENTED')}); run {escape(run_id)} is left as it is"
            )
            return EXIT_UNSUPPORTED
        if reason_of(exc) == "RUN_FINISHED":
            errors.print(f"run {escape(run_id)} has already finished")
            return EXIT_STATE
        raise
    status = status_name(resp.run.status)
    console.print(f"run {escape(resp.run.run_id)} will finish at its next save point (status {status})")
    return 0
