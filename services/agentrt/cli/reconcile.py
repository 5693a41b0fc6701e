"""`agentrt reconcile RUN CALL (--run-again | --fail MESSAGE | --result TEXT [--error])`.

Answers one call a suspended run waits on for a reconciliation: a call with side effects
whose outcome is unknown because the tool service stopped while it ran
(PENDING_CALL_KIND_RECONCILIATION; docs/services/runs.md "Interrupted side effects"). One
ResumeRun with one `Reconciliation`:

- `--run-again`: RUN_AGAIN, the call runs once more as a new execution attempt (the
  interrupted one may also have taken effect);
- `--fail MESSAGE`: FAIL, the model is told the call failed, with MESSAGE (not blank);
- `--result TEXT [--error]`: SUPPLY_RESULT, the model reads TEXT as the call's output
  (status OK, or ERROR with `--error`), e.g. after the operator checked what happened.

Everything is checked before anything is sent: exactly one action, `--error` only with
`--result`, the run suspended, CALL pending on it and waiting for a reconciliation (a call
waiting for an approval is pointed to `agentrt approve`). A refusal prints one line on
standard error and changes nothing. Other calls of the run are left as they are: the run
continues once every call it waits on is answered.

Exit status (as `runs`/`approve`/`stop`, cli/runs.py): 0 answered; 1 the run is not
suspended (or was answered or ended meanwhile); 2 bad flags, or CALL is not waiting for a
reconciliation; 4 the mesh was unreachable or refused the request (status and reason
printed; an unknown run is NOT_FOUND RUN_NOT_FOUND).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console
from rich.markup import escape

from agentrt.cli.args import utf8_text
from agentrt.cli.render import status_name, visible
from agentrt.cli.runs import (
    EXIT_STATE,
    EXIT_USAGE,
    PENDING_KINDS,
    add_runs_addr,
    error_console,
    resume,
    with_client,
)
from agentrt.client.channels import MeshClient
from agentrt.v1 import common_pb2 as cpb
from agentrt.v1 import run_service_pb2 as pb

#: What a pending call of another kind waits for, and who answers it.
_ELSEWHERE = {
    pb.PENDING_CALL_KIND_APPROVAL: (
        "an approval, not a reconciliation: answer it with `agentrt approve {run}`"
    ),
    pb.PENDING_CALL_KIND_EXTERNAL_RESULT: (
        "a client's result, not a reconciliation: only the client that declared the tool can answer it"
    ),
}
#: The `summary` of a result an operator supplied (displays only; the model never reads it).
SUPPLIED_SUMMARY = "result supplied by an operator (agentrt reconcile)"


def add_parser(subparsers: Any) -> None:
    """Register the `reconcile` subcommand."""
    p = subparsers.add_parser(
        "reconcile",
        help="answer a call whose outcome is unknown (the tool service stopped while it ran)",
        description="Answer one call a suspended run waits on for a reconciliation. "
        "Say exactly one of --run-again, --fail MESSAGE, --result TEXT.",
    )
    p.add_argument("run_id", metavar="RUN")
    p.add_argument("call_id", metavar="CALL", help="the call, as `agentrt runs show RUN` names it")
    p.add_argument(
        "--run-again",
        action="store_true",
        help="run the call once more (the interrupted run may also have taken effect)",
    )
    p.add_argument(
        "--fail", type=utf8_text, metavar="MESSAGE", help="record the call as failed; the model reads MESSAGE"
    )
    p.add_argument(
        "--result", type=utf8_text, metavar="TEXT", help="the call's output, as the model will read it"
    )
    p.add_argument("--error", action="store_true", help="with --result: the output reports a failure")
    add_runs_addr(p)
    p.set_defaults(func=reconcile_command)


def check_flags(args: argparse.Namespace) -> str | None:
    """Return why the flags do not say one action (a one-line message), or None when they do."""
    given = [
        flag
        for flag, value in (("--run-again", args.run_again), ("--fail", args.fail), ("--result", args.result))
        if value not in (None, False)
    ]
    if len(given) != 1:
        got = f" (got {' and '.join(given)})" if given else ""
        return f"say exactly one of --run-again, --fail MESSAGE or --result TEXT{got}"
    if args.error and args.result is None:
        return "--error marks a supplied result as a failure; it goes with --result TEXT"
    if args.fail is not None and not args.fail.strip():
        return "--fail needs a MESSAGE: the model reads why the call failed"
    return None


def reconciliation(args: argparse.Namespace) -> pb.Reconciliation:
    """Return the Reconciliation the (checked) flags ask for, for `args.call_id`."""
    if args.run_again:
        return pb.Reconciliation(call_id=args.call_id, action=pb.RECONCILIATION_ACTION_RUN_AGAIN)
    if args.fail is not None:
        return pb.Reconciliation(
            call_id=args.call_id, action=pb.RECONCILIATION_ACTION_FAIL, message=args.fail
        )
    result = cpb.ToolResult(
        call_id=args.call_id,
        content=args.result,
        is_error=args.error,
        status=cpb.TOOL_RESULT_STATUS_ERROR if args.error else cpb.TOOL_RESULT_STATUS_OK,
        summary=SUPPLIED_SUMMARY,
    )
    return pb.Reconciliation(
        call_id=args.call_id, action=pb.RECONCILIATION_ACTION_SUPPLY_RESULT, result=result
    )


def reconcile_command(args: argparse.Namespace) -> int:
    """Run `agentrt reconcile RUN CALL ...`; return the exit status."""
    problem = check_flags(args)
    if problem:
        error_console().print(f"agentrt reconcile: {escape(problem)}")
        return EXIT_USAGE
    answer = reconciliation(args)
    return with_client(args, lambda client, console: reconcile_call(client, console, args.run_id, answer))


def _done(answer: pb.Reconciliation) -> str:
    if answer.action == pb.RECONCILIATION_ACTION_RUN_AGAIN:
        return "it runs once more"
    if answer.action == pb.RECONCILIATION_ACTION_FAIL:
        return f"recorded as failed; the model reads: {answer.message}"
    kind = "an error" if answer.result.is_error else "its output"
    return f"the supplied result ({len(answer.result.content)} characters) is {kind}"


async def reconcile_call(client: MeshClient, console: Console, run_id: str, answer: pb.Reconciliation) -> int:
    """Answer one call of a suspended run waiting for a reconciliation; return the exit status.

    Args:
        client: the mesh client (RunService).
        console: where the outcome is printed: one line for the answer, one for the run's
            new status, and one listing the calls it still waits on (if any).
        run_id: the run (a parent run answers a call of its child run too: ResumeRun forwards it).
        answer: the reconciliation, its `call_id` the call.

    Returns:
        0 once ResumeRun accepted the answer; EXIT_STATE when the run is not suspended (also
        when it was answered or ended between GetRun and ResumeRun); EXIT_USAGE when the call
        is not pending on the run or waits for something else.

    Raises:
        grpc.aio.AioRpcError: GetRun or ResumeRun failed otherwise (NOT_FOUND RUN_NOT_FOUND,
            INVALID_ARGUMENT e.g. REQUEST_TOO_LARGE, UNAVAILABLE).
    """
    errors = error_console()
    call_id = answer.call_id
    run = (await client.run_service.GetRun(pb.GetRunRequest(run_id=run_id))).run
    if run.status != cpb.RUN_STATUS_SUSPENDED:
        errors.print(
            f"run {escape(run_id)} is {status_name(run.status)}, not suspended: nothing to reconcile"
        )
        return EXIT_STATE
    pending = {p.call.call_id: p for p in run.pending_calls}
    call = pending.get(call_id)
    if call is None or call.kind != pb.PENDING_CALL_KIND_RECONCILIATION:
        if call is not None and call.kind in _ELSEWHERE:
            why = f"waits for {_ELSEWHERE[call.kind].format(run=run_id)}"
        else:
            waiting = [
                p.call.call_id for p in run.pending_calls if p.kind == pb.PENDING_CALL_KIND_RECONCILIATION
            ]
            why = f"is not pending on this run (waiting for a reconciliation: {', '.join(waiting) or 'none'})"
        errors.print(escape(visible(f"agentrt reconcile: call {call_id} of run {run_id} {why}")))
        return EXIT_USAGE
    resp = await resume(client, errors, pb.ResumeRunRequest(run_id=run_id, reconciliations=[answer]))
    if resp is None:
        return EXIT_STATE
    child = f" in child run {call.run_id}" if call.run_id else ""
    console.print(escape(visible(f"reconciled {call_id} {call.call.name}{child}: {_done(answer)}")))
    after = resp.run
    console.print(escape(f"run {after.run_id} is {status_name(after.status)}"))
    if after.status == cpb.RUN_STATUS_SUSPENDED and after.pending_calls:
        left = ", ".join(
            f"{p.call.call_id} ({PENDING_KINDS.get(p.kind, 'unknown')})" for p in after.pending_calls
        )
        console.print(escape(f"still waiting: {left}"))
    return 0
