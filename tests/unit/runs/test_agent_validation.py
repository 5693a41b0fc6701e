"""The run loop's list of model providers stays the gateway's."""

from __future__ import annotations

from agentrt.gateway.gateway import KNOWN_PROVIDERS as GATEWAY_PROVIDERS
from agentrt.runs.agents import KNOWN_PROVIDERS


def test_known_providers_match_the_gateway():
    assert set(KNOWN_PROVIDERS) == set(GATEWAY_PROVIDERS)
