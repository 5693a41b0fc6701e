"""`agentrt up` and `start_mesh` as processes: ready, refusal of a taken port, a dying service, stop."""

from __future__ import annotations

import os
import signal
import socket
import urllib.request
from urllib.parse import urlparse

import grpc
import pytest
from e2e_helpers import (
    STATE_TIMEOUT,
    agentrt,
    free_base_port,
    free_port_map,
    output_of,
    pid_alive,
    read_manifest,
    wait_for,
)
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.cli.serve import SERVICES
from agentrt.cli.up import MeshStartError, PortTakenError, start_mesh
from tests import ports
from tests.ports import free_ports

pytestmark = pytest.mark.slow


def _serving(address: str) -> bool:
    with grpc.insecure_channel(address) as channel:
        resp = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=5)
        return resp.status == health_pb2.HealthCheckResponse.SERVING


def _listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


def _wait_up(proc, state, cwd) -> dict:
    def ready_or_exited():
        return read_manifest(state) or (proc.poll() is not None and {"exited": proc.returncode})

    manifest = wait_for(ready_or_exited, "agentrt up ready")
    assert "exited" not in manifest, output_of(cwd)
    return manifest


def test_start_mesh_serves_every_service_and_reports_a_killed_one(tmp_path):
    mesh = start_mesh(tmp_path / "state", ports=free_port_map())
    try:
        assert list(mesh.addresses) == list(SERVICES)
        for address in mesh.addresses.values():
            assert _serving(address)
        assert mesh.exited() is None
        os.kill(mesh.pids["sessions"], signal.SIGKILL)
        gone = mesh.wait_exit(timeout=STATE_TIMEOUT)
        assert gone is not None, "the handle did not report the killed service"
        assert gone.name == "sessions"
        assert gone.returncode == -signal.SIGKILL
        assert "SIGKILL" in gone.describe()
    finally:
        codes = mesh.stop()
    assert all(code is not None for code in codes.values())
    assert not any(pid_alive(pid) for pid in mesh.pids.values())
    assert (tmp_path / "state" / "logs" / "runs.log").exists()


def test_start_mesh_refuses_a_taken_port_before_spawning(tmp_path):
    ports = free_port_map()
    with _listen(ports["tools"]):
        with pytest.raises(PortTakenError) as info:
            start_mesh(tmp_path / "state", ports=ports)
    assert info.value.service == "tools"
    assert info.value.port == ports["tools"]
    assert str(ports["tools"]) in str(info.value) and "tools" in str(info.value)
    # nothing was spawned: no log was even opened
    assert not (tmp_path / "state" / "logs" / "runs.log").exists()


def test_start_mesh_starts_runs_only_after_its_peers_serve(tmp_path):
    # sessions cannot start (a database URL of no supported driver): runs, which takes over
    # unfinished runs at start through its peers, must never have been spawned.
    state = tmp_path / "state"
    with pytest.raises(MeshStartError) as info:
        start_mesh(state, ports=free_port_map(), env={"AGENTRT_SESSIONS_DB": "garbage://x"})
    assert info.value.service == "sessions", str(info.value)
    assert "exited with status 2" in str(info.value)
    assert any("unsupported database URL" in line for line in info.value.log_tail), info.value.log_tail
    assert not (state / "logs" / "runs.log").exists()
    for peer in ("gateway", "tools", "tasks"):
        assert (state / "logs" / f"{peer}.log").exists()


def test_up_refuses_a_taken_port_naming_port_and_service(tmp_path):
    base = free_base_port()
    with _listen(base + SERVICES.index("gateway")):
        proc = agentrt("up", "--base-port", str(base), "--state-dir", str(tmp_path / "state"), cwd=tmp_path)
        code = proc.wait(timeout=STATE_TIMEOUT)
    out = output_of(tmp_path)
    assert code != 0, out
    assert f"port {base + 1}" in out and "gateway" in out, out
    assert read_manifest(tmp_path / "state") is None


def test_up_reports_a_killed_service_and_stops_the_rest(tmp_path):
    base = free_base_port()
    state = tmp_path / "state"
    proc = agentrt("up", "--base-port", str(base), "--state-dir", str(state), cwd=tmp_path)
    try:
        manifest = _wait_up(proc, state, tmp_path)
        expected = {n: f"127.0.0.1:{base + i}" for i, n in enumerate(SERVICES)}
        assert {n: manifest[n]["address"] for n in SERVICES} == expected
        pids = {n: int(manifest[n]["pid"]) for n in SERVICES}
        os.kill(pids["tools"], signal.SIGKILL)
        code = proc.wait(timeout=STATE_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = output_of(tmp_path)
    assert code != 0, out
    assert "tools" in out and "SIGKILL" in out, out
    for name, pid in pids.items():
        assert not pid_alive(pid), f"{name} (pid {pid}) still runs after agentrt up exited"


def test_up_stops_everything_on_sigterm_and_exits_zero(tmp_path):
    base = free_base_port()
    state = tmp_path / "state"
    proc = agentrt("up", "--base-port", str(base), "--state-dir", str(state), cwd=tmp_path)
    try:
        manifest = _wait_up(proc, state, tmp_path)
        out = output_of(tmp_path)
        for name in SERVICES:
            assert name in out and manifest[name]["address"] in out
            # each service's Prometheus endpoint, on a free port `agentrt up` chose, is printed and answers
            metrics = manifest[name]["metrics"]
            assert metrics.startswith("http://127.0.0.1:") and metrics.endswith("/metrics") and metrics in out
            with urllib.request.urlopen(metrics, timeout=10) as resp:
                assert "agentrt_rpc_server_requests_total" in resp.read().decode()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=STATE_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert code == 0, output_of(tmp_path)
    for name in SERVICES:
        assert not pid_alive(int(manifest[name]["pid"])), name
    assert read_manifest(state) is None


def test_services_die_with_a_killed_up(tmp_path):
    base = free_base_port()
    state = tmp_path / "state"
    proc = agentrt("up", "--base-port", str(base), "--state-dir", str(state), cwd=tmp_path)
    try:
        manifest = _wait_up(proc, state, tmp_path)
        pids = [int(manifest[name]["pid"]) for name in SERVICES]
        proc.kill()  # SIGKILL: the supervisor gets no chance to stop anything
        proc.wait(timeout=STATE_TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    wait_for(
        lambda: not any(pid_alive(pid) for pid in pids), "the services to exit after their supervisor died"
    )


def test_serve_drains_on_sigterm_and_exits_98_on_a_taken_port(tmp_path):
    (port,) = free_ports(1)
    env = {"AGENTRT_STATE_DIR": str(tmp_path / "state")}
    first = tmp_path / "first"
    second = tmp_path / "second"
    first.mkdir()
    second.mkdir()
    proc = agentrt("serve", "tasks", "--port", str(port), env=env, cwd=first)
    try:
        wait_for(lambda: proc.poll() is not None or _serving_quietly(f"127.0.0.1:{port}"), "tasks SERVING")
        assert proc.poll() is None, output_of(first)
        taken = agentrt("serve", "tasks", "--port", str(port), env=env, cwd=second)
        assert taken.wait(timeout=STATE_TIMEOUT) == 98, output_of(second)
        assert f"port {port} is taken" in output_of(second)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=STATE_TIMEOUT) == 0, output_of(first)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _serving_quietly(address: str) -> bool:
    try:
        return _serving(address)
    except grpc.RpcError:
        return False


def test_agentrt_up_started_by_a_test_takes_its_metrics_ports_from_the_tests_band(tmp_path):
    # e2e_helpers.agentrt names them (tests/ports.py): left to `agentrt up`, they came from the
    # OS's ephemeral range, where an outgoing connection of the suite may hold one (exit 98).
    base = free_base_port()
    state = tmp_path / "state"
    proc = agentrt("up", "--base-port", str(base), "--state-dir", str(state), cwd=tmp_path)
    try:
        manifest = wait_for(
            lambda: read_manifest(state) or (proc.poll() is not None and {"exited": proc.returncode}),
            "agentrt up ready",
        )
        assert "exited" not in manifest, output_of(tmp_path)
        metrics = {n: urlparse(str(manifest[n]["metrics"])).port or 0 for n in SERVICES}
        outside = {n: p for n, p in metrics.items() if not ports.BAND_LOW <= p < ports.BAND_HIGH}
        assert not outside, f"metrics ports outside the tests' band: {outside}"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=STATE_TIMEOUT)
