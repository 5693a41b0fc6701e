"""`agentrt serve all` refuses what it cannot honor, with an exit status and a message naming it.

Per-service flags (each service reads its own from AGENTRT_<SVC>_*) and a port of 0 are usage
errors (exit 2) found before anything starts; a taken port (gRPC or metrics) is exit 98 naming
the service, after the services already started were stopped. The exit-status cases run
`python -m agentrt.cli.main serve all` as a subprocess in a session of its own, and check
that nothing of it is left: no process in that session, no port of it still bound.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from agentrt.cli.main import build_parser
from agentrt.cli.ports import port_taken
from agentrt.cli.serve import EXIT_PORT_TAKEN, EXIT_USAGE, SERVICES, build_config
from agentrt.cli.serve_all import build_configs, run_serve_all
from tests.ports import free_ports
from tests.unit.cli.serve_process import serve_to_end


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--port", "50051"], "--port"),
        (["--db", "sqlite+aiosqlite:///x.db"], "--db"),
        (["--metrics-port", "9464"], "--metrics-port"),
        (["--event-loop", "asyncio"], "--event-loop"),
        *[([f"--{peer}-addr", "127.0.0.1:1"], f"--{peer}-addr") for peer in SERVICES],
    ],
)
def test_a_per_service_flag_is_refused_naming_it(argv, flag, capsys):
    args = build_parser().parse_args(["serve", "all", *argv])
    assert run_serve_all(args, build_config) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{flag} names one service's setting" in err, err
    assert "AGENTRT_<SVC>_*" in err


def test_every_flag_given_is_named(capsys):
    args = build_parser().parse_args(["serve", "all", "--port", "1", "--tools-addr", "127.0.0.1:2"])
    assert run_serve_all(args, build_config) == EXIT_USAGE
    assert "--port, --tools-addr names" in capsys.readouterr().err


def test_peers_are_this_process_own_services_whatever_the_environment_says(monkeypatch):
    ports = _ports()
    for name, port in ports.items():
        monkeypatch.setenv(f"AGENTRT_{name.upper()}_PORT", str(port))
        monkeypatch.setenv(f"AGENTRT_{name.upper()}_ADDR", "10.9.9.9:1")
    configs = build_configs(build_parser().parse_args(["serve", "all", "--host", "0.0.0.0"]), build_config)
    assert [c.server.port for c in configs.values()] == [ports[n] for n in configs]
    assert configs["runs"].gateway_address == f"127.0.0.1:{ports['gateway']}"
    assert configs["runs"].sessions_address == f"127.0.0.1:{ports['sessions']}"
    assert configs["tasks"].runs_address == f"127.0.0.1:{ports['runs']}"


def test_the_health_port_goes_to_the_runs_service_alone(monkeypatch):
    # AGENTRT_HEALTH_PORT is one setting for the process: five services binding it could not
    # start (the second one found it taken). Runs starts last and stops first, so its health
    # there is SERVING only while all five serve.
    monkeypatch.setenv("AGENTRT_HEALTH_PORT", "50999")
    configs = build_configs(build_parser().parse_args(["serve", "all"]), build_config)
    assert {n: c.server.health_port for n, c in configs.items()} == {
        "sessions": 0,
        "tools": 0,
        "gateway": 0,
        "tasks": 0,
        "runs": 50999,
    }


def _ports() -> dict[str, int]:
    return dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))


def _serve_all(tmp_path: Path, env: dict[str, str], *argv: str) -> tuple[int, str]:
    """Run `serve all` to its end in a session of its own (`serve_to_end`)."""
    return serve_to_end(tmp_path, env, "all", *argv)


def _port_env(ports: dict[str, int]) -> dict[str, str]:
    return {f"AGENTRT_{n.upper()}_PORT": str(p) for n, p in ports.items()}


def test_a_flag_exits_2_before_starting_anything(tmp_path):
    code, err = _serve_all(tmp_path, {}, "--metrics-port", "9464")
    assert code == EXIT_USAGE, err
    assert "--metrics-port names one service's setting" in err
    assert "Traceback" not in err
    assert not (tmp_path / "state").exists()  # no service opened its database


def test_a_port_of_0_exits_2_naming_the_variable(tmp_path):
    code, err = _serve_all(tmp_path, {**_port_env(_ports()), "AGENTRT_RUNS_PORT": "0"})
    assert code == EXIT_USAGE, err
    assert "AGENTRT_RUNS_PORT is 0" in err and "Traceback" not in err, err
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("which", ["grpc", "metrics"])
def test_a_taken_port_exits_98_naming_the_service_and_leaves_nothing(tmp_path, which):
    ports = _ports()
    (metrics,) = free_ports(1)
    env = _port_env(ports)
    if which == "grpc":
        service, taken = "tools", ports["tools"]  # sessions starts before it
    else:
        service, taken = "gateway", metrics  # sessions and tools start before it
        env["AGENTRT_GATEWAY_METRICS_PORT"] = str(metrics)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        code, err = _serve_all(tmp_path, env)
    assert code == EXIT_PORT_TAKEN, err
    assert f"port {taken} of {service} is taken" in err, err
    assert "Traceback" not in err
    # the services started before it were stopped with it: their ports are free again
    assert (tmp_path / "state" / "sessions.db").exists(), "sessions did not start first"
    for name, port in ports.items():
        assert not port_taken("127.0.0.1", port), f"{name}'s port {port} is still bound"


def test_a_port_over_65535_exits_2_naming_the_variable(tmp_path):
    # gRPC would bind it modulo 65536 (70000 -> 4464): a port nobody asked for
    code, err = _serve_all(tmp_path, {**_port_env(_ports()), "AGENTRT_TASKS_PORT": "70000"})
    assert code == EXIT_USAGE, err
    assert "AGENTRT_TASKS_PORT=70000 is outside 0..65535" in err and "Traceback" not in err, err
    assert not (tmp_path / "state").exists()


def test_a_store_that_refuses_exits_1_naming_the_service_and_leaves_nothing(tmp_path):
    ports = _ports()
    (closed,) = free_ports(1)  # nothing listens there: the connection is refused
    env = {**_port_env(ports), "AGENTRT_TOOLS_DB": f"postgresql+asyncpg://postgres@127.0.0.1:{closed}/x"}
    code, err = _serve_all(tmp_path, env)
    assert code == 1, err
    assert "cannot start: agentrt.v1.ToolService: its store did not answer at start" in err, err
    assert "ConnectionRefusedError" in err
    assert "Traceback" not in err and "never awaited" not in err, err
    assert (tmp_path / "state" / "sessions.db").exists(), "sessions did not start first"
    for name, port in ports.items():
        assert not port_taken("127.0.0.1", port), f"{name}'s port {port} is still bound"
