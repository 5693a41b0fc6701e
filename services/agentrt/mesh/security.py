"""Transport security and caller identity of the mesh: TLS files, mTLS, tenant-bound tokens.

Owns three things, all configured by files a Kubernetes Secret mounts (read at start, the
certificates again whenever their files change, so a rotated Secret needs no restart):

- `TlsConfig`: the PEM files of a process's TLS identity. A server with `cert_file` and
  `key_file` serves TLS; with `client_auth` it also requires a client certificate signed by
  `ca_file` (mTLS). The same files are the process's identity as a client of its peers:
  `ca_file` verifies their server certificates, and `cert_file`/`key_file` are presented as
  its client certificate.
- `TokenTable`: a token file mapping bearer tokens to tenants, so a caller holding a tenant's
  token is that tenant whatever `x-agentrt-tenant` it sends (another tenant in the header is
  refused with PERMISSION_DENIED/TENANT_NOT_ALLOWED). A token mapped to `*` may name any
  tenant by header, like the single shared `AGENTRT_AUTH_TOKEN` (the dev default, and what
  services send to their peers on behalf of a run's tenant).
- `server_credentials` / `channel_credentials`: grpc credentials built from a `TlsConfig`.

Invariants: a malformed file is refused at start (ValueError naming the file and line), never
half-applied; tokens are kept only as SHA-256 digests; health is never behind a token (the
interceptor) and can be served on a plaintext port of its own (`MeshServer`), because the
kubelet's gRPC probe speaks neither TLS nor bearer tokens.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from dataclasses import dataclass
from pathlib import Path

import grpc

from agentrt.mesh.context import valid_tenant

log = logging.getLogger("agentrt.mesh")

#: The tenant of a token that may name any tenant by header (services, operators).
ANY_TENANT = "*"


@dataclass(frozen=True)
class TlsConfig:
    """PEM files of a process's TLS identity (all "" = plaintext, the dev default).

    Attributes:
        cert_file: certificate chain of this process (server certificate, and its client
            certificate towards peers); with key_file, turns TLS on for the server.
        key_file: private key of cert_file.
        ca_file: CA bundle that verifies peers' server certificates and, with client_auth,
            callers' client certificates. "" on a client uses the system roots.
        client_auth: require and verify a client certificate on every connection (mTLS).
        server_name: the name a client checks the server certificate against instead of
            the target's host (for addresses that are IPs); "" checks the target's host.
    """

    cert_file: str = ""
    key_file: str = ""
    ca_file: str = ""
    client_auth: bool = False
    server_name: str = ""

    @property
    def serves_tls(self) -> bool:
        """True when the server side is TLS (a certificate and its key are configured)."""
        return bool(self.cert_file and self.key_file)

    @property
    def dials_tls(self) -> bool:
        """True when channels to peers use TLS (a CA or a client certificate is configured)."""
        return bool(self.ca_file or self.serves_tls)

    def check(self) -> None:
        """Refuse an incomplete or unreadable combination.

        Raises:
            ValueError: a certificate without its key (or the reverse), client_auth without
                ca_file or without a server certificate, or a file that cannot be read.
        """
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("TLS needs both a certificate file and its key file")
        if self.client_auth and not (self.ca_file and self.serves_tls):
            raise ValueError("mTLS (client_auth) needs a CA file and the server's certificate and key")
        for name in (self.cert_file, self.key_file, self.ca_file):
            if name and not os.access(name, os.R_OK):
                raise ValueError(f"TLS file {name!r} cannot be read")


def _read(name: str) -> bytes | None:
    return Path(name).read_bytes() if name else None


def _stamp(tls: TlsConfig) -> tuple[float, ...]:
    """Modification times of the TLS files (a mounted Secret rotates them in place)."""
    stamps = []
    for name in (tls.cert_file, tls.key_file, tls.ca_file):
        try:
            stamps.append(os.stat(name).st_mtime if name else 0.0)
        except OSError:
            stamps.append(-1.0)
    return tuple(stamps)


def _certificate_configuration(tls: TlsConfig) -> grpc.ServerCertificateConfiguration:
    key, cert = _read(tls.key_file), _read(tls.cert_file)
    assert key is not None and cert is not None
    return grpc.ssl_server_certificate_configuration([(key, cert)], root_certificates=_read(tls.ca_file))


def server_credentials(tls: TlsConfig) -> grpc.ServerCredentials:
    """Return TLS server credentials that re-read the files when they change.

    gRPC asks for the certificate configuration at each new handshake; the files are read
    again only when one of their modification times changed, and a rotation caught half
    written (unreadable or not PEM) keeps the previous configuration, logged.

    Raises:
        ValueError: the configuration is incomplete (see `TlsConfig.check`).
        OSError: a file cannot be read at start.
    """
    tls.check()
    state = {"stamp": _stamp(tls)}
    initial = _certificate_configuration(tls)

    def fetch() -> grpc.ServerCertificateConfiguration | None:
        stamp = _stamp(tls)
        if stamp == state["stamp"]:
            return None
        try:
            fresh = _certificate_configuration(tls)
        except (OSError, ValueError, AssertionError) as exc:
            log.warning("TLS files changed but cannot be read yet (%s); keeping the previous ones", exc)
            return None
        state["stamp"] = stamp
        log.info("TLS files changed; new connections use the new certificate")
        return fresh

    return grpc.dynamic_ssl_server_credentials(initial, fetch, require_client_authentication=tls.client_auth)


def channel_credentials(tls: TlsConfig) -> grpc.ChannelCredentials:
    """Return TLS channel credentials: the CA (or system roots) and, when set, the client certificate.

    Raises:
        OSError: a file cannot be read.
    """
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls.ca_file),
        private_key=_read(tls.key_file) if tls.serves_tls else None,
        certificate_chain=_read(tls.cert_file) if tls.serves_tls else None,
    )


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class TokenTable:
    """Bearer tokens and the tenant each is bound to (see the module docstring).

    The file has one token per line: `TOKEN TENANT`, separated by whitespace, where TENANT is
    a tenant name (1..64 of letters, digits, `_ . -`) or `*` for any tenant; blank lines and
    lines starting with `#` are ignored. A token appears at most once.
    """

    def __init__(self, bindings: dict[str, str]) -> None:
        """Build from token -> tenant (or ANY_TENANT); only digests of the tokens are kept."""
        self._tenants = {_digest(token): tenant for token, tenant in bindings.items()}

    def __len__(self) -> int:
        return len(self._tenants)

    @classmethod
    def parse(cls, text: str, source: str = "the token file") -> TokenTable:
        """Parse the file's text.

        Raises:
            ValueError: a line that is not `TOKEN TENANT`, a malformed tenant, a repeated token,
                or no token at all; the message names the source and the line number.
        """
        bindings: dict[str, str] = {}
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split()
            if len(parts) != 2:
                raise ValueError(f"{source} line {number}: expected `TOKEN TENANT`")
            token, tenant = parts
            if tenant != ANY_TENANT and not valid_tenant(tenant):
                raise ValueError(f"{source} line {number}: malformed tenant {tenant!r}")
            if token in bindings:
                raise ValueError(f"{source} line {number}: the token is listed twice")
            bindings[token] = tenant
        if not bindings:
            raise ValueError(f"{source} lists no token")
        return cls(bindings)

    @classmethod
    def load(cls, path: str) -> TokenTable:
        """Read and parse a token file.

        Raises:
            ValueError: the file cannot be read, or see `parse`.
        """
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"token file {path!r} cannot be read: {exc}") from exc
        return cls.parse(text, source=f"token file {path!r}")

    def tenant_of(self, token: str) -> str | None:
        """Return the tenant bound to token (ANY_TENANT for an unbound one), or None when unknown."""
        return self._tenants.get(_digest(token))


@dataclass(frozen=True)
class Caller:
    """Who a call's bearer token says the caller is.

    Attributes:
        tenant: the bound tenant, or ANY_TENANT when the header decides.
    """

    tenant: str


def identify(bearer: str, shared_token: str, table: TokenTable | None) -> Caller | None:
    """Return the caller a bearer token identifies, or None when it identifies nobody.

    Args:
        bearer: the token sent (the `authorization` value without `Bearer `).
        shared_token: the single shared token ("" = none); it may name any tenant.
        table: the tenant-bound tokens, or None.
    """
    if shared_token and hmac.compare_digest(bearer.encode(), shared_token.encode()):
        return Caller(ANY_TENANT)
    if table is not None and bearer:
        tenant = table.tenant_of(bearer)
        if tenant is not None:
            return Caller(tenant)
    return None
