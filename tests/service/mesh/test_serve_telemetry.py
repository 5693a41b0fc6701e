"""`agentrt serve` as a process: --metrics-port and --log-format, and bad telemetry settings
(exit 2 naming the variable, exit 98 naming a taken metrics port), never a traceback."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.ports import free_port

pytestmark = pytest.mark.slow

EXIT_TIMEOUT = 60


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRT_", "OTEL_"))}
    return {**base, "AGENTRT_STATE_DIR": str(tmp_path), **extra}


def _serve(tmp_path: Path, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `agentrt serve sessions` until it exits (it should, at start)."""
    return subprocess.run(
        [sys.executable, "-m", "agentrt.cli.main", "serve", "sessions", "--port", str(free_port()), *flags],
        env=_env(tmp_path, **env),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
    )


@pytest.mark.parametrize(
    ("flags", "env", "words"),
    [
        ((), {"AGENTRT_LOG_FORMAT": "xml"}, "AGENTRT_LOG_LEVEL or AGENTRT_LOG_FORMAT: log format 'xml'"),
        ((), {"OTEL_TRACES_EXPORTER": "jaeger"}, "OTEL_TRACES_EXPORTER='jaeger'"),
        (
            (),
            {"AGENTRT_SESSIONS_METRICS_PORT": "70000"},
            "AGENTRT_SESSIONS_METRICS_PORT=70000: a port must be 0..65535",
        ),
        (("--metrics-port", "-5"), {}, "metrics port -5 is outside 0..65535"),
        ((), {"AGENTRT_EVENT_LOOP": "trio"}, "AGENTRT_EVENT_LOOP must be one of uvloop, asyncio, not 'trio'"),
    ],
    ids=["log-format", "exporter", "metrics-port-env", "metrics-port-flag", "event-loop"],
)
def test_bad_telemetry_settings_exit_2_with_a_message(tmp_path, flags, env, words):
    done = _serve(tmp_path, *flags, **env)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr and "Traceback" not in done.stderr


def test_a_taken_metrics_port_exits_98_naming_it(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = _serve(tmp_path, "--metrics-port", str(port))
    assert done.returncode == 98, done.stderr
    assert f"port {port} is taken" in done.stderr and "Traceback" not in done.stderr


def test_a_bad_event_loop_flag_is_a_usage_error(tmp_path):
    done = _serve(tmp_path, "--event-loop", "trio")
    assert done.returncode == 2 and "invalid choice: 'trio'" in done.stderr


def test_the_tools_service_refuses_uvloop(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "agentrt.cli.main", "serve", "tools", "--port", str(free_port())]
        + ["--event-loop", "uvloop"],
        env=_env(tmp_path),
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
    )
    assert done.returncode == 2, done.stderr
    assert "runs on the asyncio event loop only" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_metrics_port_and_json_logs_from_the_flags(tmp_path, loop):
    # Serves, answers and drains on either event loop (uvloop is the default: no flag).
    port, metrics = free_port(), free_port()
    log_path = tmp_path / "sessions.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentrt.cli.main", "serve", "sessions", "--port", str(port)]
            + ["--metrics-port", str(metrics), "--log-format", "json"]
            + ([] if loop == "uvloop" else ["--event-loop", loop]),
            env=_env(tmp_path),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + EXIT_TIMEOUT
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                assert proc.poll() is None, log_path.read_text()
                try:
                    if stub.Check(health_pb2.HealthCheckRequest(), timeout=1).status == 1:
                        break
                except grpc.RpcError:
                    pass
                assert time.monotonic() < deadline, "sessions never became SERVING"
                time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10) as resp:
            text = resp.read().decode()
        assert (
            'agentrt_rpc_server_requests_total{code="OK",method="Check",service="grpc.health.v1.Health"}'
            in text
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=EXIT_TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    records = [json.loads(line) for line in log_path.read_text().splitlines() if line.startswith("{")]
    messages = [r["message"] for r in records if r.get("service") == "sessions"]
    assert any(m.startswith("serving agentrt.v1.SessionService") for m in messages), messages
    assert any(
        m.startswith("starting sessions on ") and m.endswith(f"(event loop: {loop})") for m in messages
    )
    assert any(m == f"metrics on http://127.0.0.1:{metrics}/metrics" for m in messages), messages
