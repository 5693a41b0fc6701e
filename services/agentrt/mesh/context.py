"""Per-call context the interceptor sets: the caller's tenant, and whether the server stops.

Servicers read `current_tenant()`; domain code takes the tenant as an argument. Every id
a service stores is scoped by tenant, and another tenant's id answers NOT_FOUND.
`server_stopping()` is the serving MeshServer's event set when its drain begins (a
long-lived stream reads it to end itself in time: mesh/calls.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import re

DEFAULT_TENANT = "default"
TENANT_HEADER = "x-agentrt-tenant"
_TENANT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")

_tenant: contextvars.ContextVar[str] = contextvars.ContextVar("agentrt_tenant", default=DEFAULT_TENANT)
_stopping: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar(
    "agentrt_stopping", default=None
)


def current_tenant() -> str:
    """Return the tenant of the call being served ("default" when none was sent)."""
    return _tenant.get()


def set_tenant(tenant: str) -> contextvars.Token[str]:
    """Set the tenant for the current task; returns the token to reset it."""
    return _tenant.set(tenant)


def valid_tenant(tenant: str) -> bool:
    """Return True for 1..64 chars of letters, digits, ``_ . -`` starting alphanumeric."""
    return bool(_TENANT_RE.fullmatch(tenant))  # fullmatch: `$` alone admits a trailing newline


def reset_tenant(token: contextvars.Token[str]) -> None:
    """Restore the tenant that was current before `set_tenant` returned token."""
    _tenant.reset(token)


def server_stopping() -> asyncio.Event | None:
    """Return the event set when the server serving this call begins its drain (None: unknown)."""
    return _stopping.get()


def set_server_stopping(event: asyncio.Event | None) -> None:
    """Name the serving server's stop event for the current task (the MeshInterceptor does)."""
    _stopping.set(event)
