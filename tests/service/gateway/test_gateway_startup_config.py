"""`agentrt serve gateway` as a process: bad configuration is exit 2 with a message, a taken
metrics port is exit 98 naming that port; never a traceback (docs/operations.md "exit status")."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ports import free_port

pytestmark = pytest.mark.slow

#: Generous: a process that does not exit by then is a failure (it should exit at start).
EXIT_TIMEOUT = 60


def serve_gateway(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run `agentrt serve gateway` on a free port with env (and no local model) until it exits."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTRT_", "OPENAI_", "ANTHROPIC_"))}
    base.update(AGENTRT_LOCAL_MODEL_PATH="/nonexistent", AGENTRT_STATE_DIR=str(tmp_path))
    port = str(free_port())
    return subprocess.run(
        [sys.executable, "-m", "agentrt.cli.main", "serve", "gateway", "--port", port],
        env={**base, **env},
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=EXIT_TIMEOUT,
    )


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"AGENTRT_GATEWAY_METRICS_PORT": "-1"}, "AGENTRT_GATEWAY_METRICS_PORT=-1: a port must be 0..65535"),
        (
            {"AGENTRT_GATEWAY_METRICS_PORT": "70000"},
            "AGENTRT_GATEWAY_METRICS_PORT=70000: a port must be 0..65535",
        ),
        ({"AGENTRT_GATEWAY_METRICS_PORT": "http"}, "AGENTRT_GATEWAY_METRICS_PORT='http' is not an integer"),
        (
            {"AGENTRT_LIMITER_BACKEND": "redis", "AGENTRT_LIMITER_URL": "redis://:::bad"},
            "AGENTRT_LIMITER_URL is not a valid redis URL",
        ),
        (
            {"AGENTRT_LIMITER_BACKEND": "postgres", "AGENTRT_LIMITER_URL": "postgresql+asyncpg://:::bad"},
            "AGENTRT_LIMITER_URL is not a valid postgres URL",
        ),
        ({"AGENTRT_LIMITER_STORE_TIMEOUT_SECONDS": "0"}, "store timeout must be > 0"),
        ({"AGENTRT_GATEWAY_JOURNAL_URL": "mysql://x/y"}, "AGENTRT_GATEWAY_JOURNAL_URL must be memory"),
        (
            {"AGENTRT_GATEWAY_JOURNAL_LEASE_SECONDS": "0"},
            "AGENTRT_GATEWAY_JOURNAL_LEASE_SECONDS must be positive",
        ),
        (
            {"AGENTRT_GATEWAY_JOURNAL_LEASE_SECONDS": "inf", "AGENTRT_GATEWAY_JOURNAL_TTL_SECONDS": "inf"},
            "AGENTRT_GATEWAY_JOURNAL_LEASE_SECONDS must be positive and finite",
        ),
        ({"AGENTRT_GATEWAY_MAX_QUEUE_WAIT_SECONDS": "-1"}, "AGENTRT_GATEWAY_MAX_QUEUE_WAIT_SECONDS must be"),
    ],
    ids=[
        "metrics-port-negative",
        "metrics-port-too-big",
        "metrics-port-not-a-number",
        "redis-url",
        "pg-url",
        "timeout",
        "journal-url",
        "journal-lease",
        "journal-lease-endless",
        "queue-wait",
    ],
)
def test_bad_configuration_exits_2_with_a_message(tmp_path, env, words):
    done = serve_gateway(tmp_path, **env)
    assert done.returncode == 2, done.stderr
    assert words in done.stderr
    assert "Traceback" not in done.stderr


def test_a_taken_metrics_port_exits_98_naming_the_metrics_port(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        metrics_port = taken.getsockname()[1]
        done = serve_gateway(tmp_path, AGENTRT_GATEWAY_METRICS_PORT=str(metrics_port))
    assert done.returncode == 98, done.stderr
    assert f"port {metrics_port} is taken" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("backend", ["postgres", "redis"])
def test_a_limiter_store_that_never_answers_fails_the_start_in_one_line(tmp_path, backend):
    """A store that accepts connections but never answers: exit 1 naming the limiter store."""
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(16)  # accepts (the kernel completes handshakes), never answers
        port = hole.getsockname()[1]
        url = {
            "postgres": f"postgresql+asyncpg://u@127.0.0.1:{port}/db",
            "redis": f"redis://127.0.0.1:{port}/0",
        }[backend]
        done = serve_gateway(
            tmp_path,
            AGENTRT_LIMITER_BACKEND=backend,
            AGENTRT_LIMITER_URL=url,
            AGENTRT_LIMITER_STORE_TIMEOUT_SECONDS="1",
        )
    assert done.returncode == 1, done.stderr
    assert "cannot start: the limiter store" in done.stderr and "AGENTRT_LIMITER_URL" in done.stderr
