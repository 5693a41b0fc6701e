"""The configuration every service shares, read at the process edge (004 §2.14).

`ServerConfig` is a frozen dataclass passed down to a service's build_server; library
code never reads the environment. `env()` is the one reader of `AGENTRT_*` variables and
is only called from config modules and the CLI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrt.mesh.security import TlsConfig

MAX_REQUEST_BYTES = 16 * 1024 * 1024

#: Default ports of the five services on a laptop (`agentrt up`).
DEFAULT_PORTS = {"runs": 50051, "gateway": 50052, "tools": 50053, "sessions": 50054, "tasks": 50055}


def env(name: str, default: str = "") -> str:
    """Return the environment variable AGENTRT_<name>, or default when unset or empty."""
    value = os.environ.get(f"AGENTRT_{name}", "")
    return value if value else default


@dataclass(frozen=True)
class ServerConfig:
    """How one service process listens and where it keeps state.

    Attributes:
        host: interface to bind, e.g. "127.0.0.1".
        port: TCP port; 0 picks a free one.
        db_url: SQLAlchemy async URL, e.g. "sqlite+aiosqlite:///.agentrt/sessions.db".
        auth_token: bearer token callers must send; "" disables auth.
        max_request_bytes: largest request accepted, in bytes (16 MiB).
        grace_seconds: how long in-flight calls get to finish on SIGTERM, in seconds.
        state_dir: directory for local state (SQLite files, workspaces).
        tokens_file: file of tenant-bound bearer tokens (`TOKEN TENANT` lines, see
            mesh/security.py); "" = none.
        tls: the TLS files (server certificate, CA for mTLS and for dialing peers).
        health_port: a second, plaintext port serving only grpc.health (for probes that
            speak no TLS, e.g. the kubelet's); 0 = none.
        max_connection_age_seconds: a connection older than this is told to go away
            (GOAWAY; calls in flight finish), so clients re-resolve the service's DNS name
            and reach replicas added since; 0 = never.
    """

    host: str = "127.0.0.1"
    port: int = 0
    db_url: str = ""
    auth_token: str = ""
    max_request_bytes: int = MAX_REQUEST_BYTES
    grace_seconds: float = 5.0
    state_dir: str = ".agentrt"
    tokens_file: str = ""
    tls: TlsConfig = field(default_factory=TlsConfig)
    health_port: int = 0
    max_connection_age_seconds: float = 300.0

    @property
    def address(self) -> str:
        """Return "host:port" as configured."""
        return f"{self.host}:{self.port}"


def _flag(name: str) -> bool:
    value = env(name, "false").strip().lower()
    if value not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(f"AGENTRT_{name}={value!r} is not a boolean (true/false)")
    return value in ("1", "true", "yes", "on")


def edge_from_env() -> dict[str, Any]:
    """Return the ServerConfig settings every service reads alike, as keyword arguments.

    Reads AGENTRT_AUTH_TOKEN (or the first line of the file AGENTRT_AUTH_TOKEN_FILE names),
    AGENTRT_TOKENS_FILE, AGENTRT_TLS_CERT_FILE, AGENTRT_TLS_KEY_FILE, AGENTRT_TLS_CA_FILE,
    AGENTRT_TLS_CLIENT_AUTH (true/false), AGENTRT_TLS_SERVER_NAME, AGENTRT_HEALTH_PORT
    (default 0), AGENTRT_MAX_CONNECTION_AGE_SECONDS (default 300) and AGENTRT_DRAIN_SECONDS
    (default 5: how long in-flight calls get on SIGTERM; keep it below the pod's
    terminationGracePeriodSeconds minus its preStop).

    Raises:
        ValueError: a malformed number or boolean, or an unreadable token file.
    """
    token = env("AUTH_TOKEN", "")
    token_file = env("AUTH_TOKEN_FILE", "")
    if token_file and not token:
        try:
            token = Path(token_file).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"AGENTRT_AUTH_TOKEN_FILE {token_file!r} cannot be read: {exc}") from exc
    try:
        health_port = int(env("HEALTH_PORT", "0"))
        age = float(env("MAX_CONNECTION_AGE_SECONDS", "300"))
        drain = float(env("DRAIN_SECONDS", "5"))
    except ValueError as exc:
        raise ValueError(
            f"AGENTRT_HEALTH_PORT, _MAX_CONNECTION_AGE_SECONDS or _DRAIN_SECONDS is not a number: {exc}"
        ) from exc
    if not 0 <= health_port <= 65535:
        raise ValueError(f"AGENTRT_HEALTH_PORT={health_port} is outside 0..65535")
    if age < 0 or drain < 0:
        raise ValueError("AGENTRT_MAX_CONNECTION_AGE_SECONDS and AGENTRT_DRAIN_SECONDS cannot be negative")
    return {
        "auth_token": token,
        "tokens_file": env("TOKENS_FILE", ""),
        "tls": TlsConfig(
            cert_file=env("TLS_CERT_FILE", ""),
            key_file=env("TLS_KEY_FILE", ""),
            ca_file=env("TLS_CA_FILE", ""),
            client_auth=_flag("TLS_CLIENT_AUTH"),
            server_name=env("TLS_SERVER_NAME", ""),
        ),
        "health_port": health_port,
        "max_connection_age_seconds": age,
        "grace_seconds": drain,
    }
