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
from agentrt.mesh.telemetry.logs import LogConfig
from agentrt.mesh.telemetry.tracing import EXPORTERS, TracingConfig

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
        metrics_port: TCP port of the Prometheus `/metrics` endpoint on `host`; 0 = none.
        db_pool_size, db_max_overflow: PostgreSQL connections this process keeps open, and
            may open beyond them under load (SQLAlchemy's pool). Size them so that every
            replica of every service together stays below the server's max_connections.
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
    metrics_port: int = 0
    db_pool_size: int = 10
    db_max_overflow: int = 10

    @property
    def address(self) -> str:
        """Return "host:port" as configured."""
        return f"{self.host}:{self.port}"


def flag(name: str, default: bool = False) -> bool:
    """Return the boolean AGENTRT_<name> (1/true/yes/on or 0/false/no/off), else default.

    Raises:
        ValueError: a value that is not one of those.
    """
    return _flag(name, default)


def _flag(name: str, default: bool = False) -> bool:
    value = env(name, "true" if default else "false").strip().lower()
    if value not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(f"AGENTRT_{name}={value!r} is not a boolean (true/false)")
    return value in ("1", "true", "yes", "on")


def metrics_port_from_env(service: str) -> int:
    """Return AGENTRT_<SERVICE>_METRICS_PORT (default 0: no /metrics endpoint).

    Raises:
        ValueError: not an integer, or outside 0..65535 (the message names the variable).
    """
    name = f"{service.upper()}_METRICS_PORT"
    value = env(name, "0")
    try:
        port = int(value)
    except ValueError:
        raise ValueError(f"AGENTRT_{name}={value!r} is not an integer") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"AGENTRT_{name}={port}: a port must be 0..65535 (0 = no /metrics endpoint)")
    return port


def edge_from_env(service: str = "") -> dict[str, Any]:
    """Return the ServerConfig settings every service reads alike, as keyword arguments.

    Reads AGENTRT_AUTH_TOKEN (or the first line of the file AGENTRT_AUTH_TOKEN_FILE names),
    AGENTRT_TOKENS_FILE, AGENTRT_TLS_CERT_FILE, AGENTRT_TLS_KEY_FILE, AGENTRT_TLS_CA_FILE,
    AGENTRT_TLS_CLIENT_AUTH (true/false), AGENTRT_TLS_SERVER_NAME, AGENTRT_HEALTH_PORT
    (default 0), AGENTRT_MAX_CONNECTION_AGE_SECONDS (default 300) and AGENTRT_DRAIN_SECONDS
    (default 5: how long in-flight calls get on SIGTERM; keep it below the pod's
    terminationGracePeriodSeconds minus its preStop), AGENTRT_DB_POOL_SIZE (10) and
    AGENTRT_DB_MAX_OVERFLOW (10); with `service`, also its
    AGENTRT_<SERVICE>_METRICS_PORT (`metrics_port_from_env`).

    Raises:
        ValueError: a malformed number, port or boolean (a negative or NaN duration), or an
            unreadable token file.
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
        pool = int(env("DB_POOL_SIZE", "10"))
        overflow = int(env("DB_MAX_OVERFLOW", "10"))
    except ValueError as exc:
        raise ValueError(
            "AGENTRT_HEALTH_PORT, _MAX_CONNECTION_AGE_SECONDS, _DRAIN_SECONDS, _DB_POOL_SIZE or "
            f"_DB_MAX_OVERFLOW is not a number: {exc}"
        ) from exc
    if pool < 1 or overflow < 0:
        raise ValueError("AGENTRT_DB_POOL_SIZE must be at least 1 and AGENTRT_DB_MAX_OVERFLOW at least 0")
    if not 0 <= health_port <= 65535:
        raise ValueError(f"AGENTRT_HEALTH_PORT={health_port} is outside 0..65535")
    if not (age >= 0 and drain >= 0):  # also NaN, which fails every comparison
        raise ValueError(
            "AGENTRT_MAX_CONNECTION_AGE_SECONDS and AGENTRT_DRAIN_SECONDS must be numbers >= 0"
            f" (got {age} and {drain})"
        )
    extra = {"metrics_port": metrics_port_from_env(service)} if service else {}
    return {
        **extra,
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
        "db_pool_size": pool,
        "db_max_overflow": overflow,
    }


def _otel(name: str) -> str:
    return os.environ.get(name, "").strip()


def tracing_from_env() -> TracingConfig:
    """Read where spans go from the standard OpenTelemetry variables, and the content opt-in.

    Tracing is on when OTEL_TRACES_EXPORTER names exporters ("otlp", "console", or both
    comma-separated), or, when it is unset, when OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
    OTEL_EXPORTER_OTLP_ENDPOINT is set (then "otlp"); otherwise, with
    OTEL_TRACES_EXPORTER=none or OTEL_SDK_DISABLED=true, it is off (the default: unlike the
    OpenTelemetry default of "otlp", nothing is sent anywhere unless asked).
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" (default)
    or "http/protobuf". OTEL_SERVICE_NAME names the spans' service (default agentrt-<svc>).
    AGENTRT_TRACE_CONTENT (true/false, default false) lets spans carry conversation content
    (004 §2.11c). Everything else (endpoint, headers, certificates, sampler, batch sizes)
    the OpenTelemetry SDK reads itself.

    Raises:
        ValueError: an exporter or protocol this build does not implement, or a malformed boolean.
    """
    if _otel("OTEL_SDK_DISABLED").lower() == "true":
        exporters: tuple[str, ...] = ()
    else:
        named = _otel("OTEL_TRACES_EXPORTER").lower()
        if named:
            listed = tuple(n.strip() for n in named.split(",") if n.strip())
            exporters = tuple(n for n in listed if n != "none")
            for name in exporters:
                if name not in EXPORTERS:
                    known = ", ".join(EXPORTERS)
                    raise ValueError(
                        f"OTEL_TRACES_EXPORTER={named!r}: {name!r} is not one of {known} or none"
                    )
        elif _otel("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or _otel("OTEL_EXPORTER_OTLP_ENDPOINT"):
            exporters = ("otlp",)
        else:
            exporters = ()
    protocol = (
        _otel("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or _otel("OTEL_EXPORTER_OTLP_PROTOCOL") or "grpc"
    ).lower()
    record_content = _flag("TRACE_CONTENT")
    try:
        return TracingConfig(
            exporters=exporters,
            protocol=protocol,
            service_name=_otel("OTEL_SERVICE_NAME"),
            record_content=record_content,
        )
    except ValueError as exc:
        raise ValueError(f"OTEL_EXPORTER_OTLP_PROTOCOL: {exc}") from None


def logging_from_env() -> LogConfig:
    """Read AGENTRT_LOG_LEVEL (INFO), AGENTRT_LOG_FORMAT (text|json) and AGENTRT_LOG_CONTENT (false).

    Raises:
        ValueError: an unknown format or level, or a malformed boolean (the message names the variable).
    """
    content = _flag("LOG_CONTENT")
    try:
        return LogConfig(
            level=env("LOG_LEVEL", "INFO"), format=env("LOG_FORMAT", "text").lower(), content=content
        )
    except ValueError as exc:
        raise ValueError(f"AGENTRT_LOG_LEVEL or AGENTRT_LOG_FORMAT: {exc}") from None
