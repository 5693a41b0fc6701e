"""Build and serve the ModelGatewayService process.

`build_server` creates one adapter per configured provider, the input-token limiter over
its configured store (`AGENTRT_LIMITER_BACKEND`: memory, postgres or redis) and the retry
policy. The ready hook prepares the limiter's store (Alembic migrations on PostgreSQL, a
ping on Redis; failing either fails the start) and loads the local model when it is
configured, so the first turn does not pay for it; the close hook closes the providers' HTTP
clients and the limiter's store.

Keyed model calls go through the model-call journal (gateway/journal, decision 0019)
over `journal_url` (AGENTRT_GATEWAY_JOURNAL_URL, else the gateway's database, else
<state dir>/gateway.db); the ready hook migrates its table (failing that fails the start)
and the close hook stops its flights and closes it.

Metrics follow the scheme of every service (docs/decisions/0009): the gateway's series
(GatewayMetrics) live in the registry it hands to its MeshServer, which adds the RPC series
and serves them all on `server.metrics_port` (AGENTRT_GATEWAY_METRICS_PORT; a taken one is
`mesh.server.MetricsPortInUseError`, naming that port).
"""

from __future__ import annotations

import logging

from agentrt.gateway.config import GatewayConfig
from agentrt.gateway.gateway import ModelGateway, parse_model_ref
from agentrt.gateway.journal import CallJournal, build_store
from agentrt.gateway.limiter import AdaptiveTokenLimiter, TokenLimiter, build_limiter
from agentrt.gateway.metrics import GatewayMetrics, limiter_gauges
from agentrt.gateway.providers.anthropic_messages import AnthropicMessagesProvider
from agentrt.gateway.providers.openai_chat import OpenAIChatProvider
from agentrt.gateway.providers.openai_responses import OpenAIResponsesProvider
from agentrt.gateway.providers.provider import Provider
from agentrt.gateway.retry import RetryPolicy
from agentrt.gateway.servicer import GatewayServicer
from agentrt.mesh.server import MeshServer, MetricsPortInUseError, ServiceBinding, StartupError
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc

SERVICE_NAME = "agentrt.v1.ModelGatewayService"

log = logging.getLogger("agentrt.gateway")


__all__ = ["MetricsPortInUseError", "build_gateway", "build_providers", "build_server", "serve"]


def build_providers(config: GatewayConfig) -> dict[str, Provider]:
    """Return an adapter for each configured provider, by provider key."""
    providers: dict[str, Provider] = {}
    if config.local.enabled:
        from agentrt.gateway.providers.local import LocalProvider

        providers["local"] = LocalProvider(config.local)
    if config.openai.enabled:
        providers["openai"] = OpenAIResponsesProvider(config.openai)
    if config.openai_chat.enabled:
        providers["openai-chat"] = OpenAIChatProvider(config.openai_chat)
    if config.anthropic.enabled:
        providers["anthropic"] = AnthropicMessagesProvider(config.anthropic, config.anthropic_max_tokens)
    return providers


def build_gateway(config: GatewayConfig, limiter: TokenLimiter | None = None) -> ModelGateway:
    """Return the domain gateway for config (limiter: the configured one unless given)."""
    return ModelGateway(
        build_providers(config),
        limiter or build_limiter(config.limiter_backend, config.limiter_url, config.limiter),
        default_model=parse_model_ref(config.default_model),
        retry_policy=RetryPolicy(
            max_retries=config.max_retries,
            initial_backoff_seconds=config.initial_backoff_seconds,
            max_backoff_seconds=config.max_backoff_seconds,
            max_retry_after_seconds=config.max_retry_after_seconds,
        ),
        request_timeout_seconds=config.request_timeout_seconds,
        default_max_queue_wait_seconds=config.default_max_queue_wait_seconds,
    )


def build_server(config: GatewayConfig, limiter: TokenLimiter | None = None) -> MeshServer:
    """Return the ModelGatewayService server (not started).

    Args:
        config: the gateway's configuration.
        limiter: a limiter to use instead of the configured one (the caller then owns it).

    Raises:
        ValueError: the limiter's URL does not suit its backend.
    """
    owned = (
        build_limiter(
            config.limiter_backend,
            config.limiter_url,
            config.limiter,
            pool_size=config.server.db_pool_size,
            max_overflow=config.server.db_max_overflow,
        )
        if limiter is None
        else None
    )
    gateway = build_gateway(config, limiter or owned)
    # Its own registry per server; the limiter's last-known budgets are read at each scrape.
    metrics = GatewayMetrics()
    active = limiter or owned
    if isinstance(active, AdaptiveTokenLimiter):
        metrics.add_gauge_reader(lambda: limiter_gauges(active.snapshot()))
    journal = CallJournal(
        gateway,
        build_store(
            config.journal_url,
            pool_size=config.server.db_pool_size,
            max_overflow=config.server.db_max_overflow,
        ),
        lease_s=config.journal_lease_seconds,
        ttl_s=config.journal_ttl_seconds,
    )
    servicer = GatewayServicer(gateway, metrics, journal)
    binding = ServiceBinding(
        SERVICE_NAME, lambda s: pb_grpc.add_ModelGatewayServiceServicer_to_server(servicer, s)
    )

    async def ready() -> None:
        if owned is not None:
            try:
                await owned.prepare()
            except Exception as exc:  # noqa: BLE001 - named in one line instead of a traceback
                raise StartupError(
                    f"the limiter store ({config.limiter_backend}, AGENTRT_LIMITER_URL) could not be "
                    f"prepared: {type(exc).__name__}: {str(exc) or 'no answer within the store timeout'}"
                ) from exc
        try:
            await journal.prepare()
        except Exception as exc:  # noqa: BLE001 - named in one line instead of a traceback
            raise StartupError(
                f"the model-call journal ({config.journal_url.split('://')[0]}, AGENTRT_GATEWAY_JOURNAL_URL) "
                f"could not be prepared: {type(exc).__name__}: {exc}"
            ) from exc
        local = gateway.provider("local")
        if local is not None:
            try:
                await local.warm()  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - a model that fails to load fails its calls, not the server
                log.exception("the local model could not be loaded; local calls will fail")

    async def close() -> None:
        # Calls that outlived their caller get what is left of the drain to finish and be
        # recorded (AGENTRT_DRAIN_SECONDS, counted from SIGTERM), then are stopped.
        await journal.close(server.drain_left_seconds())
        await gateway.close()
        if owned is not None:
            await owned.close()

    server = MeshServer(
        config.server,
        [binding],
        ready=ready,
        close=close,
        registry=metrics.registry,
        calls=servicer.generate_calls,
    )
    return server


async def serve(config: GatewayConfig) -> None:
    """Serve until SIGTERM/SIGINT, then drain."""
    await build_server(config).serve_forever()
