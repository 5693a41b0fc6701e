"""The local provider's model names (decision 0047): its own names and "default" or none; no others."""

from __future__ import annotations

import pytest

from agentrt.core.errors import MeshError, Status
from agentrt.gateway.config import LocalSettings
from agentrt.gateway.providers.local import LocalProvider

GGUF = "/models/SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.parametrize(
    "name", ["", "default", "smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct.Q4_1"]
)
def test_the_local_models_names_resolve_to_its_configured_name(name):
    assert LocalProvider(LocalSettings(model_path=GGUF)).model_id(name) == "smollm2"


@pytest.mark.parametrize(
    "name", ["nonexistent-model", "SMOLLM2", "gpt-4.1-mini", "/models/SmolLM2-135M-Instruct.Q4_1.gguf", " "]
)
def test_any_other_name_is_an_invalid_value_naming_the_served_names(name):
    with pytest.raises(MeshError) as info:
        LocalProvider(LocalSettings(model_path=GGUF)).model_id(name)
    err = info.value
    assert err.status == Status.INVALID_ARGUMENT and err.reason == "INVALID_VALUE"
    assert err.metadata == {"field": "model.model", "provider": "local"}
    assert "'smollm2'" in err.message and "'SmolLM2-135M-Instruct.Q4_1.gguf'" in err.message, err.message


def test_a_configured_name_is_one_of_the_names():
    provider = LocalProvider(LocalSettings(model_path="/m/other.gguf", default_model="mine"))
    assert provider.model_names == ("mine", "other.gguf", "other", "default")
    assert provider.model_id("other") == "mine"
    with pytest.raises(MeshError):
        provider.model_id("smollm2")
