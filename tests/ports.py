"""Ports for servers the tests start later (a mesh's processes, a restarted server).

A test that needs an address before its server binds cannot ask the OS for port 0 at bind
time. Asking the OS for a free port and binding it later races two things this suite does
all the time: the kernel hands the same ephemeral ports (net.ipv4.ip_local_port_range,
32768-60999 here) to the local end of every outgoing connection (PostgreSQL, Redis, gRPC
channels), and the other pytest-xdist worker asks for free ports too. Either can take the
port in between; the server then exits with status 98 (EADDRINUSE), or, once a stopped
server's port is given to another test's server, a late client reaches the wrong server.

So ports come from a band below the ephemeral range, split between the xdist workers, each
worker handing its slice out in turn (a port comes round again only after its whole slice),
each port checked free before it is given out.
"""

from __future__ import annotations

import itertools
import os
import random
import threading

from agentrt.cli.ports import port_taken

#: The band [BAND_LOW, BAND_HIGH): below Linux's default ephemeral range, above the ports
#: services usually hold (PostgreSQL 5432, Redis 6379, 8000-9999 for web servers).
BAND_LOW = 12000
BAND_HIGH = 32000

_lock = threading.Lock()
_cycle: itertools.cycle[int] | None = None


def _slice() -> range:
    """This process's share of the band: the whole band, or one xdist worker's part of it."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    width = (BAND_HIGH - BAND_LOW) // max(count, 1)
    low = BAND_LOW + width * (index % max(count, 1))
    return range(low, low + width)


def _next_candidate() -> int:
    global _cycle
    if _cycle is None:
        share = _slice()
        start = random.randrange(len(share))  # another suite on the machine starts elsewhere
        _cycle = itertools.cycle([*share[start:], *share[:start]])
    return next(_cycle)


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """Return `count` distinct ports of this worker's slice that nothing holds right now.

    Raises:
        RuntimeError: the slice has no `count` free ports (checked once round).
    """
    chosen: list[int] = []
    with _lock:
        for _ in range(len(_slice())):
            port = _next_candidate()
            if port not in chosen and not port_taken(host, port):
                chosen.append(port)
                if len(chosen) == count:
                    return chosen
    raise RuntimeError(f"no {count} free ports in {_slice()}")


def free_base_port(count: int, host: str = "127.0.0.1") -> int:
    """Return a port `base` of this worker's slice such that base..base+count-1 are all free now.

    Raises:
        RuntimeError: the slice has no such run of ports (checked once round).
    """
    share = _slice()
    with _lock:
        for _ in range(len(share)):
            base = _next_candidate()
            if base + count > share.stop:
                continue
            if not any(port_taken(host, base + i) for i in range(count)):
                for _ in range(count - 1):  # the run's other ports are given out with it
                    _next_candidate()
                return base
    raise RuntimeError(f"no {count} consecutive free ports in {share}")


def free_port(host: str = "127.0.0.1") -> int:
    """Return one port as `free_ports` does."""
    return free_ports(1, host)[0]
