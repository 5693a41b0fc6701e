"""Entry point of the `agentrt` command: parses the command line and dispatches.

Subcommands, one module each:
- `serve <service>` (cli/serve.py): one service in the foreground.
- `up` (cli/supervise.py over cli/up.py): the whole mesh as five processes.
- `run "<task>"` (cli/run.py, cli/render.py): a run, live.
- `runs`, `runs show RUN`, `approve RUN`, `stop RUN --after-turn` (cli/runs.py): operate runs.
- `reconcile RUN CALL` (cli/reconcile.py): answer a call whose outcome is unknown.
- `demo` (cli/demo.py): mesh + local model + one run, offline.
- `health [HOST:PORT]` (cli/health.py): one grpc.health check (container health checks).
- `tasks [stop|retry ID]` (cli/tasks.py): background tasks.
Also runnable as `python -m agentrt.cli.main`, which is how `agentrt up` starts services.
"""

from __future__ import annotations

import argparse
import sys

from agentrt.cli import health


def build_parser(*, health_only: bool = False) -> argparse.ArgumentParser:
    """Return the argparse parser of the whole command (only `health`'s when health_only).

    `agentrt health` is a container's health check, run every few seconds under a timeout:
    it skips importing the other subcommands (about a second of CPU on a loaded machine).
    """
    parser = argparse.ArgumentParser(
        prog="agentrt",
        description="agentrt: a runtime for LLM agents served as a mesh of five gRPC services.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    if health_only:
        health.add_parser(sub)
        return parser
    from agentrt.cli import demo, reconcile, run, runs, serve, supervise, tasks

    serve.add_parser(sub)
    supervise.add_parser(sub)
    run.add_parser(sub)
    runs.add_parsers(sub)
    reconcile.add_parser(sub)
    demo.add_parser(sub)
    health.add_parser(sub)
    tasks.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command with argv (default sys.argv[1:]); return the exit status."""
    given = sys.argv[1:] if argv is None else argv
    parser = build_parser(health_only=bool(given) and given[0] == "health")
    args = parser.parse_args(given)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    return int(args.func(args))


if __name__ == "__main__":
    raise SystemExit(main())
