"""AGENTRT_DRAIN_SECONDS and AGENTRT_MAX_CONNECTION_AGE_SECONDS: numbers >= 0, refused by name.

NaN passed the `< 0` check, and the service then died with a traceback at SIGTERM (uvloop's
call_later: "cannot convert float NaN to integer") instead of draining.
"""

from __future__ import annotations

import pytest

from agentrt.mesh.config import edge_from_env


@pytest.mark.parametrize("name", ["AGENTRT_DRAIN_SECONDS", "AGENTRT_MAX_CONNECTION_AGE_SECONDS"])
@pytest.mark.parametrize("value", ["-1", "nan", "NaN", "-inf"])
def test_a_negative_or_nan_duration_is_refused_by_name(monkeypatch, name, value):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="AGENTRT_DRAIN_SECONDS"):
        edge_from_env()


def test_zero_and_large_durations_are_taken(monkeypatch):
    monkeypatch.setenv("AGENTRT_DRAIN_SECONDS", "0")
    monkeypatch.setenv("AGENTRT_MAX_CONNECTION_AGE_SECONDS", "1e6")
    got = edge_from_env()
    assert got["grace_seconds"] == 0 and got["max_connection_age_seconds"] == 1e6
