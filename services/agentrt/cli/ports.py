"""Which ports the mesh's services listen on, and whether a port is free (`agentrt up`, the tests).

`ports_from_base` gives each service its gRPC port (DEFAULT_PORTS, or five consecutive
ports from a base, in SERVICES order); `metrics_ports` its Prometheus port
(`AGENTRT_<SVC>_METRICS_PORT`, else a free port the OS chose). `port_taken` and
`free_ports` ask the OS; a port reported free may still be taken by the time it is bound,
which `start_mesh` (up.py) reports as PortTakenError.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence

from agentrt.cli.args import MAX_BASE_PORT
from agentrt.cli.serve import SERVICES
from agentrt.mesh.config import DEFAULT_PORTS


def port_taken(host: str, port: int) -> bool:
    """Return True when something already listens on (or holds) host:port.

    SO_REUSEADDR is set as gRPC sets it, so a port left in TIME_WAIT by a previous mesh
    counts as free, while a listening socket still refuses the bind.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Return `count` distinct ports the OS reports free right now (a later bind may still race)."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            socks.append(sock)
        return [s.getsockname()[1] for s in socks]
    finally:
        for sock in socks:
            sock.close()


def ports_from_base(base_port: int | None) -> dict[str, int]:
    """Return service -> port: DEFAULT_PORTS, or base_port, base_port+1, ... in SERVICES order.

    Raises:
        ValueError: base_port..base_port+4 is not within 1..65535.
    """
    if base_port is None:
        return {name: DEFAULT_PORTS[name] for name in SERVICES}
    if not 1 <= base_port <= MAX_BASE_PORT:
        raise ValueError(
            f"base port must be within 1..{MAX_BASE_PORT} (five consecutive ports), not {base_port}"
        )
    return {name: base_port + i for i, name in enumerate(SERVICES)}


def metrics_ports(
    env: Mapping[str, str], host: str = "127.0.0.1", avoid: Sequence[int] = ()
) -> dict[str, int]:
    """Return service -> metrics port: AGENTRT_<SVC>_METRICS_PORT from env, else a free port.

    Args:
        env: the children's environment.
        host: the interface the ports are for.
        avoid: ports already given out (the services' gRPC ports): never chosen.

    Raises:
        ValueError: a value in env that is not a port in 0..65535.
    """
    named = {name: env.get(f"AGENTRT_{name.upper()}_METRICS_PORT", "") for name in SERVICES}
    wanted = sum(1 for v in named.values() if not v)
    candidates = [p for p in free_ports(wanted + len(avoid), host) if p not in avoid]
    free = iter(candidates[:wanted])
    ports: dict[str, int] = {}
    for name, value in named.items():
        if not value:
            ports[name] = next(free)
            continue
        if not value.isdigit() or not 0 <= int(value) <= 65535:
            raise ValueError(f"AGENTRT_{name.upper()}_METRICS_PORT={value!r}: a port must be 0..65535")
        ports[name] = int(value)
    return ports
