"""The limiter's configuration: AGENTRT_LIMITER_* variables, defaults, the old alias, refusals."""

from __future__ import annotations

import pytest

from agentrt.cli.serve import build_config
from agentrt.gateway.config import GatewayConfig
from agentrt.gateway.limiter import LimiterSettings
from agentrt.gateway.limiter.count import IMAGE_TOKENS, input_token_bound
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith(("AGENTRT_LIMITER_", "AGENTRT_GATEWAY_")):
            monkeypatch.delenv(name)


def test_defaults_are_one_in_process_budget_per_minute():
    config = GatewayConfig.from_env()
    assert (config.limiter_backend, config.limiter_url) == ("memory", "")
    assert config.limiter == LimiterSettings(
        initial_tokens=4_000_000, max_tokens=4_000_000, floor_tokens=400_000
    )
    assert config.limiter.window_seconds == 60.0 and not config.limiter.per_tenant


def test_every_variable_is_read(monkeypatch):
    for name, value in {
        "BACKEND": "redis",
        "URL": "redis://127.0.0.1:6379/2",
        "TOKENS_PER_MINUTE": "50000",
        "MAX_TOKENS_PER_MINUTE": "80000",
        "FLOOR_TOKENS_PER_MINUTE": "5000",
        "PER_TENANT": "true",
        "WINDOW_SECONDS": "10",
        "GUARD_SECONDS": "0.5",
        "COOLDOWN_SECONDS": "2",
        "PROBE_FRACTION": "0.05",
        "MODEL_FAMILIES": "gpt-4.1*=gpt-4.1",
        "EXACT_COUNT": "1",
        "NAMESPACE": "prod",
        "STORE_TIMEOUT_SECONDS": "2.5",
    }.items():
        monkeypatch.setenv(f"AGENTRT_LIMITER_{name}", value)
    config = GatewayConfig.from_env()
    s = config.limiter
    assert (config.limiter_backend, config.limiter_url) == ("redis", "redis://127.0.0.1:6379/2")
    assert (s.initial_tokens, s.max_tokens, s.floor_tokens) == (50_000, 80_000, 5_000)
    assert (s.window_seconds, s.guard_seconds, s.cooldown_seconds, s.probe_fraction) == (10, 0.5, 2, 0.05)
    assert s.per_tenant and s.exact_count and s.namespace == "prod"
    assert s.store_timeout_seconds == 2.5
    assert s.family("gpt-4.1-mini") == "gpt-4.1"


def test_the_old_variable_still_sets_the_initial_budget(monkeypatch):
    monkeypatch.setenv("AGENTRT_GATEWAY_TOKENS_PER_MINUTE", "120000")
    s = GatewayConfig.from_env().limiter
    assert (s.initial_tokens, s.max_tokens, s.floor_tokens) == (120_000, 120_000, 12_000)
    monkeypatch.setenv("AGENTRT_LIMITER_TOKENS_PER_MINUTE", "60000")  # the new name wins
    assert GatewayConfig.from_env().limiter.initial_tokens == 60_000


def test_postgres_falls_back_to_the_gateways_database_flag(monkeypatch):
    monkeypatch.setenv("AGENTRT_LIMITER_BACKEND", "postgres")
    url = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
    config = build_config("gateway", None, url, None, {})
    assert (config.limiter_backend, config.limiter_url) == ("postgres", url)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"BACKEND": "etcd"}, "use one of memory, postgres, redis"),
        ({"BACKEND": "postgres"}, "needs AGENTRT_LIMITER_URL=postgresql"),
        ({"BACKEND": "redis", "URL": "postgresql+asyncpg://x/y"}, "needs AGENTRT_LIMITER_URL=redis"),
        ({"TOKENS_PER_MINUTE": "lots"}, "invalid literal"),
        ({"TOKENS_PER_MINUTE": "1000", "MAX_TOKENS_PER_MINUTE": "500"}, "initial=1000 max=500"),
        ({"PER_TENANT": "maybe"}, "not a boolean"),
        ({"MODEL_FAMILIES": "gpt"}, "PATTERN=FAMILY"),
        ({"WINDOW_SECONDS": "-1"}, "window must be > 0"),
        # NaN passes every `<= 0` test: a NaN window counted no entry (the budget never held)
        ({"WINDOW_SECONDS": "nan"}, "window must be > 0"),
        ({"WINDOW_SECONDS": "inf"}, "window must be > 0"),
        ({"GUARD_SECONDS": "nan"}, "guard and cooldown >= 0"),
        ({"GUARD_SECONDS": "inf"}, "guard and cooldown >= 0"),
        ({"COOLDOWN_SECONDS": "nan"}, "guard and cooldown >= 0"),
        ({"STORE_TIMEOUT_SECONDS": "0"}, "store timeout must be > 0"),
        ({"STORE_TIMEOUT_SECONDS": "inf"}, "store timeout must be > 0"),
        ({"BACKEND": "redis", "URL": "redis://:::bad"}, "not a valid redis URL"),
        ({"BACKEND": "redis", "URL": "redis://h:70000/0"}, "not a valid redis URL"),
        ({"BACKEND": "postgres", "URL": "postgresql+asyncpg://:::bad"}, "not a valid postgres URL"),
        ({"BACKEND": "postgres", "URL": "postgresql+asyncpg://u@h:70000/db"}, "not a valid postgres URL"),
    ],
)
def test_bad_values_are_refused_at_start(monkeypatch, env, words):
    for name, value in env.items():
        monkeypatch.setenv(f"AGENTRT_LIMITER_{name}", value)
    with pytest.raises(ValueError, match=words):
        GatewayConfig.from_env()


def test_the_bound_counts_bytes_and_allowances_and_prices_images_by_a_constant():
    text = "é" * 1000  # 2,000 UTF-8 bytes
    plain = g.ModelRequest(
        messages=[c.Message(role=c.ROLE_USER, content=[c.ContentBlock(text=c.TextBlock(text=text))])]
    )
    assert input_token_bound(plain) >= 2000
    image = c.ContentBlock(image=c.ImageBlock(media_type="image/png", data=b"\0" * 500_000))
    with_image = g.ModelRequest()
    with_image.CopyFrom(plain)
    with_image.messages[0].content.append(image)
    assert (
        input_token_bound(plain) + IMAGE_TOKENS
        <= input_token_bound(with_image)
        < input_token_bound(plain) + IMAGE_TOKENS + 64
    )
    with_tool = g.ModelRequest()
    with_tool.CopyFrom(plain)
    with_tool.tools.add(name="t", parameters_json_schema="{}")
    assert input_token_bound(with_tool) > input_token_bound(plain) + 600


@pytest.mark.parametrize(
    ("value", "words"),
    [("-1", "must be 0..65535"), ("70000", "must be 0..65535"), ("9464x", "is not an integer")],
)
def test_a_metrics_port_outside_the_port_range_is_refused(monkeypatch, value, words):
    monkeypatch.setenv("AGENTRT_GATEWAY_METRICS_PORT", value)
    with pytest.raises(ValueError, match=words):
        GatewayConfig.from_env()


def test_well_formed_store_urls_and_metrics_ports_are_accepted(monkeypatch):
    monkeypatch.setenv("AGENTRT_GATEWAY_METRICS_PORT", "65535")
    for backend, url in [
        ("redis", "redis://127.0.0.1:6379/0"),
        ("redis", "unix:///run/redis.sock"),
        ("postgres", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"),
        ("postgres", "postgresql+asyncpg://postgres@db/test"),
    ]:
        monkeypatch.setenv("AGENTRT_LIMITER_BACKEND", backend)
        monkeypatch.setenv("AGENTRT_LIMITER_URL", url)
        config = GatewayConfig.from_env()
        assert (config.limiter_url, config.server.metrics_port) == (url, 65535)
