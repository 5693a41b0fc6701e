"""The PostgreSQL pool size of a process (AGENTRT_DB_POOL_SIZE, AGENTRT_DB_MAX_OVERFLOW): read at
the edge, handed to every service's Database, malformed values refused by name."""

from __future__ import annotations

import pytest

from agentrt.mesh.config import edge_from_env
from agentrt.runs.config import RunsConfig


def test_defaults_and_values(monkeypatch):
    monkeypatch.delenv("AGENTRT_DB_POOL_SIZE", raising=False)
    monkeypatch.delenv("AGENTRT_DB_MAX_OVERFLOW", raising=False)
    assert (edge_from_env()["db_pool_size"], edge_from_env()["db_max_overflow"]) == (10, 10)
    monkeypatch.setenv("AGENTRT_DB_POOL_SIZE", "3")
    monkeypatch.setenv("AGENTRT_DB_MAX_OVERFLOW", "0")
    server = RunsConfig.from_env().server
    assert (server.db_pool_size, server.db_max_overflow) == (3, 0)


@pytest.mark.parametrize(("pool", "overflow"), [("0", "1"), ("2", "-1"), ("many", "1"), ("2", "1.5")])
def test_bad_pool_settings_are_refused_by_name(monkeypatch, pool, overflow):
    monkeypatch.setenv("AGENTRT_DB_POOL_SIZE", pool)
    monkeypatch.setenv("AGENTRT_DB_MAX_OVERFLOW", overflow)
    with pytest.raises(ValueError, match="AGENTRT_DB_POOL_SIZE|_DB_MAX_OVERFLOW"):
        edge_from_env()
