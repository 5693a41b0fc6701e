"""TLS, mTLS, the plaintext health port and tenant-bound tokens, on the production session
server over real channels, with certificates made in the test."""

from __future__ import annotations

import os
import subprocess
import sys

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from tls_certs import CertificateAuthority

from agentrt.client.channels import MeshClient, open_channel
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.security import TlsConfig, TokenTable
from agentrt.mesh.status import reason_of
from agentrt.mesh.storage.db import sqlite_url
from agentrt.sessions.config import SessionsConfig
from agentrt.sessions.server import build_server
from agentrt.v1 import session_service_pb2 as pb
from agentrt.v1 import session_service_pb2_grpc as pb_grpc
from tests.ports import free_ports


@pytest.fixture
def pki(tmp_path):
    ca = CertificateAuthority(tmp_path, "mesh")
    server = ca.issue("sessions", dns=("localhost", "agentrt-sessions"), ips=("127.0.0.1",))
    client = ca.issue("runs", client=True)
    return ca, server, client


def _sessions(tmp_path, **server_fields) -> SessionsConfig:
    return SessionsConfig(server=ServerConfig(port=0, db_url=sqlite_url(str(tmp_path), "s"), **server_fields))


async def _list(channel: grpc.aio.Channel, **kw) -> pb.ListSessionsResponse:
    return await pb_grpc.SessionServiceStub(channel).ListSessions(pb.ListSessionsRequest(), timeout=10, **kw)


async def test_tls_server_answers_tls_clients_that_trust_its_ca_only(start_server, tmp_path, pki):
    ca, server, _ = pki
    tls = TlsConfig(cert_file=str(server.cert), key_file=str(server.key))
    address = await start_server(build_server(_sessions(tmp_path, tls=tls)))
    trusted = open_channel(address, tls=TlsConfig(ca_file=str(ca.pem)))
    plaintext = open_channel(address, tls=TlsConfig())
    stranger_ca = CertificateAuthority(tmp_path, "stranger")
    wrong_ca = open_channel(address, tls=TlsConfig(ca_file=str(stranger_ca.pem)))
    try:
        await _list(trusted)
        for channel in (plaintext, wrong_ca):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await _list(channel)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        for channel in (trusted, plaintext, wrong_ca):
            await channel.close()


async def test_tls_checks_the_name_in_the_certificate(start_server, tmp_path, pki):
    ca, _, _ = pki
    other = ca.issue("other", dns=("agentrt-gateway",))  # no name of this address
    tls = TlsConfig(cert_file=str(other.cert), key_file=str(other.key))
    address = await start_server(build_server(_sessions(tmp_path, tls=tls)))
    mismatched = open_channel(address, tls=TlsConfig(ca_file=str(ca.pem)))
    overridden = open_channel(address, tls=TlsConfig(ca_file=str(ca.pem), server_name="agentrt-gateway"))
    try:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _list(mismatched)
        assert info.value.code() == grpc.StatusCode.UNAVAILABLE
        await _list(overridden)
    finally:
        await mismatched.close()
        await overridden.close()


async def test_mtls_requires_a_client_certificate_of_the_mesh_ca(start_server, tmp_path, pki):
    ca, server, client = pki
    tls = TlsConfig(
        cert_file=str(server.cert), key_file=str(server.key), ca_file=str(ca.pem), client_auth=True
    )
    mesh = build_server(_sessions(tmp_path, tls=tls, health_port=0))
    address = await start_server(mesh)
    member = open_channel(
        address, tls=TlsConfig(ca_file=str(ca.pem), cert_file=str(client.cert), key_file=str(client.key))
    )
    anonymous = open_channel(address, tls=TlsConfig(ca_file=str(ca.pem)))
    stranger = CertificateAuthority(tmp_path, "stranger").issue("intruder", client=True)
    impostor = open_channel(
        address, tls=TlsConfig(ca_file=str(ca.pem), cert_file=str(stranger.cert), key_file=str(stranger.key))
    )
    try:
        await _list(member)
        for channel in (anonymous, impostor):
            with pytest.raises(grpc.aio.AioRpcError) as info:
                await _list(channel)
            assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        for channel in (member, anonymous, impostor):
            await channel.close()


async def test_peer_channels_use_the_identity_the_service_serves_with(start_server, tmp_path, pki):
    """A MeshClient that names no TLS dials with the process's (set by MeshServer.start): one
    Secret configures both sides of mTLS between services (its certificate carries both the
    server and the client usage)."""
    ca, _, _ = pki
    server = ca.issue("mesh", dns=("localhost",), ips=("127.0.0.1",), client=True, server=True)
    tls = TlsConfig(
        cert_file=str(server.cert), key_file=str(server.key), ca_file=str(ca.pem), client_auth=True
    )
    address = await start_server(build_server(_sessions(tmp_path, tls=tls)))
    client = MeshClient(sessions=address)
    try:
        await client.session_service.ListSessions(pb.ListSessionsRequest(), timeout=10)
    finally:
        await client.close()


async def test_health_stays_open_on_a_plaintext_port_while_the_service_is_mtls(start_server, tmp_path, pki):
    ca, server, _ = pki
    tls = TlsConfig(
        cert_file=str(server.cert), key_file=str(server.key), ca_file=str(ca.pem), client_auth=True
    )
    mesh = build_server(_sessions(tmp_path, tls=tls, auth_token="s3cret", health_port=free_ports(1)[0]))
    await start_server(mesh)
    probe = grpc.aio.insecure_channel(f"127.0.0.1:{mesh.health_port}")
    try:
        health = health_pb2_grpc.HealthStub(probe)
        for service in ("", "agentrt.v1.SessionService"):
            answer = await health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
        # The probe port serves nothing else.
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _list(probe)
        assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED
        await mesh.stop(grace=0)
        with pytest.raises(grpc.aio.AioRpcError):
            await health.Check(health_pb2.HealthCheckRequest(), timeout=2)
    finally:
        await probe.close()


TOKENS = """\
# token tenant
acme-token acme
globex-token   globex
ops-token *
"""


@pytest.fixture
async def bound(start_server, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text(TOKENS)
    address = await start_server(
        build_server(_sessions(tmp_path, auth_token="mesh-token", tokens_file=str(tokens)))
    )
    opened: list[grpc.aio.Channel] = []

    def channel(token: str, tenant: str = "") -> pb_grpc.SessionServiceStub:
        ch = open_channel(address, token=token, tenant=tenant)
        opened.append(ch)
        return pb_grpc.SessionServiceStub(ch)

    yield channel
    for ch in opened:
        await ch.close()


async def test_a_tenant_bound_token_acts_for_its_tenant_only(bound):
    acme = bound("acme-token")
    created = await acme.CreateSession(pb.CreateSessionRequest(session_id="s-acme"), timeout=10)
    assert created.session.session_id == "s-acme"
    # The same token naming its own tenant is fine; naming another is refused and changes nothing.
    await bound("acme-token", "acme").GetSession(
        pb.GetSessionRequest(session=pb.SessionRef(session_id="s-acme"))
    )
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await bound("acme-token", "globex").CreateSession(pb.CreateSessionRequest(session_id="s-stolen"))
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert reason_of(info.value) == "TENANT_NOT_ALLOWED"
    # The session was made under acme: globex's token cannot see it, the shared token naming acme can.
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await bound("globex-token").GetSession(
            pb.GetSessionRequest(session=pb.SessionRef(session_id="s-acme"))
        )
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    seen = await bound("mesh-token", "acme").GetSession(
        pb.GetSessionRequest(session=pb.SessionRef(session_id="s-acme"))
    )
    assert seen.session.session_id == "s-acme"
    listed = await bound("mesh-token", "globex").ListSessions(pb.ListSessionsRequest())
    assert "s-stolen" not in [s.session_id for s in listed.sessions]


async def test_a_star_token_and_the_shared_token_may_name_any_tenant(bound):
    await bound("ops-token", "globex").CreateSession(pb.CreateSessionRequest(session_id="s-g"))
    listed = await bound("globex-token").ListSessions(pb.ListSessionsRequest())
    assert [s.session_id for s in listed.sessions] == ["s-g"]
    # Without a header a star token is the default tenant, like the shared token.
    assert not (await bound("ops-token").ListSessions(pb.ListSessionsRequest())).sessions
    assert not (await bound("mesh-token").ListSessions(pb.ListSessionsRequest())).sessions


async def test_unknown_or_missing_tokens_are_refused_and_health_needs_none(bound, start_server):
    for token in ("nope", ""):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await bound(token).ListSessions(pb.ListSessionsRequest())
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert reason_of(info.value) == "UNAUTHENTICATED"


async def test_health_needs_no_token_with_a_token_table(start_server, tmp_path):
    tokens = tmp_path / "tokens"
    tokens.write_text("acme-token acme\n")
    address = await start_server(build_server(_sessions(tmp_path, tokens_file=str(tokens))))
    channel = open_channel(address)
    try:
        answer = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=10)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await _list(channel)
        assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        await channel.close()


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("", "lists no token"),
        ("# only a comment\n\n", "lists no token"),
        ("lonely\n", "line 1: expected `TOKEN TENANT`"),
        ("a acme extra\n", "line 1: expected `TOKEN TENANT`"),
        ("a acme\nb bad/tenant\n", "line 2: malformed tenant"),
        ("a acme\na globex\n", "line 2: the token is listed twice"),
    ],
)
def test_a_malformed_token_file_is_refused_naming_the_line(text, complaint):
    with pytest.raises(ValueError, match=complaint.replace("`", ".")):
        TokenTable.parse(text)


def test_token_table_keeps_no_token_in_clear():
    table = TokenTable.parse("s3cret-token acme\n")
    assert table.tenant_of("s3cret-token") == "acme"
    assert table.tenant_of("other") is None
    assert "s3cret-token" not in repr(vars(table))


@pytest.mark.parametrize(
    "tls",
    [
        TlsConfig(cert_file="/c.pem"),
        TlsConfig(key_file="/k.pem"),
        TlsConfig(cert_file="/c.pem", key_file="/k.pem", client_auth=True),
        TlsConfig(ca_file="/nonexistent/ca.pem"),
    ],
)
def test_incomplete_or_unreadable_tls_is_refused(tls):
    with pytest.raises(ValueError):
        tls.check()


async def test_rotated_certificate_files_are_used_by_new_connections(start_server, tmp_path, pki):
    ca, server, _ = pki
    tls = TlsConfig(cert_file=str(server.cert), key_file=str(server.key))
    address = await start_server(build_server(_sessions(tmp_path, tls=tls)))
    before = open_channel(address, tls=TlsConfig(ca_file=str(ca.pem)))
    await _list(before)
    # A Secret rotated in place: same paths, a certificate from a new CA.
    rotated_ca = CertificateAuthority(tmp_path, "rotated")
    fresh = rotated_ca.issue("sessions", dns=("localhost",), ips=("127.0.0.1",), file_stem="fresh")
    server.cert.write_bytes(fresh.cert.read_bytes())
    server.key.write_bytes(fresh.key.read_bytes())
    later = os.stat(server.cert).st_mtime + 5
    os.utime(server.cert, (later, later))
    after = open_channel(address, tls=TlsConfig(ca_file=str(rotated_ca.pem)))
    try:
        await _list(after)
    finally:
        await before.close()
        await after.close()


def test_serve_refuses_a_malformed_token_file_with_exit_2(tmp_path):
    bad = tmp_path / "tokens"
    bad.write_text("only-a-token\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrt.cli.main",
            "serve",
            "sessions",
            "--port",
            "1",
            "--tokens-file",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "line 1: expected `TOKEN TENANT`" in done.stderr


def test_serve_refuses_tls_without_a_key_with_exit_2(tmp_path, pki):
    _, server, _ = pki
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentrt.cli.main",
            "serve",
            "sessions",
            "--port",
            "1",
            "--tls-cert",
            str(server.cert),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "certificate file and its key file" in done.stderr
