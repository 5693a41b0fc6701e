"""Which process instance owns something: a journal record, a sandbox.

An owner string (`process_identity`) names one process instance: host, pid, the process's
start time (clock ticks since boot, field 22 of /proc/<pid>/stat) and a random part, so an
owner can be told dead (`owner_dead`) on this host even after its pid is reused. Owners on
another host are never declared dead here (there is no way to look).
"""

from __future__ import annotations

import os
import secrets
import socket


def process_identity() -> str:
    """This process's owner string: "<host[:24]>:<pid>:<start time>:<8 hex>"."""
    try:
        with open("/proc/self/stat") as f:
            start = f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        start = "0"
    return f"{socket.gethostname()[:24]}:{os.getpid()}:{start}:{secrets.token_hex(4)}"


def owner_dead(owner: str) -> bool:
    """True when owner names a process on this host that no longer exists.

    False for a malformed owner and for one on another host.
    """
    try:
        host, pid, start, _ = owner.rsplit(":", 3)
    except ValueError:
        return False
    if host != socket.gethostname()[:24]:
        return False
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19] != start
    except (OSError, ValueError, IndexError):
        return True
