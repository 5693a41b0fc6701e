"""The TLS and token flags of `agentrt serve` and `agentrt run`, over their `AGENTRT_*` fallbacks.

Flags win over the variables `mesh.config.edge_from_env` reads (AGENTRT_TLS_CERT_FILE,
AGENTRT_TLS_KEY_FILE, AGENTRT_TLS_CA_FILE, AGENTRT_TLS_CLIENT_AUTH, AGENTRT_TLS_SERVER_NAME,
AGENTRT_TOKENS_FILE, AGENTRT_AUTH_TOKEN(_FILE), AGENTRT_HEALTH_PORT). Every file is checked
before anything starts: an unreadable or malformed one is a usage error (exit 2) naming it.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from agentrt.cli.args import port_number
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.security import TlsConfig, TokenTable


def add_client_flags(p: argparse.ArgumentParser) -> None:
    """Add the flags a caller of the mesh needs: CA, client certificate, server name, token file."""
    p.add_argument("--tls-ca", metavar="FILE", default=None, help="CA bundle (PEM): dial the mesh over TLS")
    p.add_argument("--tls-cert", metavar="FILE", default=None, help="certificate (PEM): this side's identity")
    p.add_argument("--tls-key", metavar="FILE", default=None, help="private key (PEM) of --tls-cert")
    p.add_argument(
        "--tls-server-name",
        metavar="NAME",
        default=None,
        help="name the server certificate must carry, when the address is not that name",
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        default=None,
        help="file whose first line is the bearer token (default AGENTRT_AUTH_TOKEN[_FILE])",
    )


def add_server_flags(p: argparse.ArgumentParser) -> None:
    """Add `serve`'s flags: the client ones, plus mTLS, the token table and the health port."""
    add_client_flags(p)
    p.add_argument(
        "--tls-client-auth",
        action="store_true",
        default=None,
        help="require a client certificate signed by --tls-ca (mTLS)",
    )
    p.add_argument(
        "--tokens-file",
        metavar="FILE",
        default=None,
        help="file of `TOKEN TENANT` lines: tokens bound to tenants (`*` = any tenant)",
    )
    p.add_argument(
        "--health-port",
        type=port_number,
        default=None,
        help="also serve grpc.health on this plaintext port (for probes); default AGENTRT_HEALTH_PORT",
    )


def _token_from_file(path: str) -> str:
    try:
        token = Path(path).read_text(encoding="utf-8").strip().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"token file {path!r} cannot be read: {exc}") from exc
    if not token or not token[0].strip():
        raise ValueError(f"token file {path!r} is empty")
    return token[0].strip()


def _tls_of(args: argparse.Namespace, base: TlsConfig) -> TlsConfig:
    changes: dict[str, Any] = {}
    for flag, name in (("tls_ca", "ca_file"), ("tls_cert", "cert_file"), ("tls_key", "key_file")):
        if getattr(args, flag, None):
            changes[name] = getattr(args, flag)
    if getattr(args, "tls_server_name", None):
        changes["server_name"] = args.tls_server_name
    if getattr(args, "tls_client_auth", None):
        changes["client_auth"] = True
    return dataclasses.replace(base, **changes)


def apply_server_flags(args: argparse.Namespace, server: ServerConfig) -> ServerConfig:
    """Return server with the flags applied, every file checked.

    Raises:
        ValueError: a TLS combination that cannot work, or a file that cannot be read or
            parsed (the token table: see `TokenTable.parse`).
    """
    changes: dict[str, Any] = {"tls": _tls_of(args, server.tls)}
    if args.tokens_file:
        changes["tokens_file"] = args.tokens_file
    if args.token_file:
        changes["auth_token"] = _token_from_file(args.token_file)
    if args.health_port is not None:
        changes["health_port"] = args.health_port
    server = dataclasses.replace(server, **changes)
    server.tls.check()
    if server.tokens_file:
        TokenTable.load(server.tokens_file)
    return server


def client_security(args: argparse.Namespace, token: str, tls: TlsConfig) -> tuple[str, TlsConfig]:
    """Return (bearer token, TLS files) of a caller: flags over the given environment values.

    Raises:
        ValueError: an unreadable token file, or a client certificate without its key.
    """
    if args.token_file:
        token = _token_from_file(args.token_file)
    tls = _tls_of(args, tls)
    if bool(tls.cert_file) != bool(tls.key_file):
        raise ValueError("--tls-cert and --tls-key go together")
    for name in (tls.ca_file, tls.cert_file, tls.key_file):
        if name and not Path(name).is_file():
            raise ValueError(f"TLS file {name!r} cannot be read")
    return token, dataclasses.replace(tls, client_auth=False)
