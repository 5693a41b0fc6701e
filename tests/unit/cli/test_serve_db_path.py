"""A SQLite database whose directory cannot be had: `agentrt serve` refuses it in one line.

`agentrt serve <svc>` and `agentrt serve all`, run as `python -m agentrt.cli.main` in a
session of their own, exit 1 with "cannot start: ..." naming the service and the database
file, no traceback, and leave no process or port behind (mesh/storage/sqlite_file.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrt.cli.ports import port_taken
from agentrt.cli.serve import SERVICES
from tests.ports import free_ports
from tests.unit.cli.serve_process import serve_to_end


def _serve(tmp_path: Path, env: dict[str, str], *argv: str) -> tuple[int, str]:
    """Run `agentrt serve ...` to its end in a session of its own (`serve_to_end`)."""
    return serve_to_end(tmp_path, env, *argv)


def _under_a_file(tmp_path: Path, name: str) -> tuple[str, str]:
    """Return (a SQLite URL whose directory would be under a regular file, the database path)."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a regular file")
    path = str(blocker / "sub" / f"{name}.db")
    return f"sqlite+aiosqlite:///{path}", path


@pytest.mark.parametrize("service", ["sessions", "tools", "runs", "tasks", "gateway"])
def test_serve_one_service_refuses_a_database_directory_it_cannot_create(tmp_path, service):
    url, path = _under_a_file(tmp_path, service)
    (port,) = free_ports(1)
    code, err = _serve(tmp_path, {f"AGENTRT_{service.upper()}_DB": url}, service, "--port", str(port))
    assert code == 1, err
    assert f"agentrt serve {service}: cannot start: the SQLite database {path} cannot be opened" in err, err
    assert "not-a-directory/sub cannot be created (Not a directory)" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err  # the start line, the refusal
    assert not port_taken("127.0.0.1", port)


def test_serve_all_refuses_a_database_directory_it_cannot_create_and_leaves_nothing(tmp_path):
    ports = dict(zip(SERVICES, free_ports(len(SERVICES)), strict=True))
    url, path = _under_a_file(tmp_path, "tools")
    env = {f"AGENTRT_{n.upper()}_PORT": str(p) for n, p in ports.items()}
    env["AGENTRT_TOOLS_DB"] = url  # sessions starts before tools
    code, err = _serve(tmp_path, env, "all")
    assert code == 1, err
    assert f"agentrt serve all: cannot start: tools: the SQLite database {path} cannot be opened" in err, err
    assert "Traceback" not in err, err
    assert (tmp_path / "state" / "sessions.db").exists(), "sessions did not start first"
    for name, port in ports.items():
        assert not port_taken("127.0.0.1", port), f"{name}'s port {port} is still bound"
