"""`agentrt health [HOST:PORT]`: ask a service's grpc.health whether it is SERVING.

What a container's HEALTHCHECK and a compose healthcheck run. The default address is
`127.0.0.1:$AGENTRT_HEALTH_PORT`, the plaintext health port every service opens when that
variable is set (the image sets 8081), so it needs neither TLS nor a token. Exit status: 0
SERVING; 1 any other status (NOT_SERVING while starting or draining, or NOT_FOUND: the
server does not know `--service`); 4 no answer within `--timeout` seconds; 2 bad flags (a
timeout that is not a number of seconds in (0, 3600], an address that is not HOST:PORT with a
port in 1..65535 or `unix:PATH`) or no address to ask.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.mesh.config import env

EXIT_NOT_SERVING = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 4
#: The longest --timeout, seconds (a health check that waits longer is a configuration error).
MAX_TIMEOUT_S = 3600.0


def add_parser(subparsers: Any) -> None:
    """Register the `health` subcommand on an argparse subparsers object."""
    p = subparsers.add_parser(
        "health",
        help="check a service's grpc.health (exit 0 when SERVING)",
        description="Ask grpc.health.v1.Health/Check of a service; exit 0 when SERVING.",
    )
    p.add_argument(
        "address",
        nargs="?",
        default=None,
        metavar="HOST:PORT",
        help="plaintext address to ask (default 127.0.0.1:$AGENTRT_HEALTH_PORT)",
    )
    p.add_argument("--service", default="", help='service name to ask about (default "": the process)')
    p.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer (default 3)")
    p.set_defaults(func=run_health)


def run_health(args: argparse.Namespace) -> int:
    """Check once; return the exit status (see the module docstring)."""
    address = args.address
    if not address:
        port = env("HEALTH_PORT", "")
        if not port or port == "0":
            print("agentrt health: give HOST:PORT or set AGENTRT_HEALTH_PORT", file=sys.stderr)
            return EXIT_USAGE
        address = f"127.0.0.1:{port}"
    problem = _address_problem(address)
    if problem:
        print(f"agentrt health: {address!r} {problem}", file=sys.stderr)
        return EXIT_USAGE
    if not (math.isfinite(args.timeout) and 0 < args.timeout <= MAX_TIMEOUT_S):
        print(f"agentrt health: --timeout must be seconds in (0, {MAX_TIMEOUT_S:g}]", file=sys.stderr)
        return EXIT_USAGE
    try:
        with grpc.insecure_channel(address) as channel:
            answer = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=args.service), timeout=args.timeout
            )
    except grpc.RpcError as exc:
        code = exc.code() if isinstance(exc, grpc.Call) else None
        if code == grpc.StatusCode.NOT_FOUND:  # an answer: the server does not know the service
            print(f"{address} {args.service}: NOT_FOUND (no such service)")
            return EXIT_NOT_SERVING
        print(f"agentrt health: {address}: {code.name if code else exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    print(f"{address} {args.service or '(process)'}: {status}")
    return 0 if answer.status == health_pb2.HealthCheckResponse.SERVING else EXIT_NOT_SERVING


def _address_problem(address: str) -> str:
    """Return why address cannot be asked ("" when it can): HOST:PORT, [IPv6]:PORT or unix:PATH."""
    if address.startswith("unix:"):
        return "" if len(address) > len("unix:") else "names no socket path"
    if "://" in address or "/" in address:
        return "is not HOST:PORT (no scheme or path)"
    host, sep, port = address.rpartition(":")
    if not sep or not host or host == "[]":
        return "is not HOST:PORT"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        return "has no port in 1..65535"
    return ""
