"""The input-token limiter's rules (seed 002 "Model Client Throughput & Rate Limiting", improved).

Every model call reserves its input tokens before it is sent and settles with the
provider's reported usage afterwards. This module holds the shapes and the pure rules;
`AdaptiveTokenLimiter` (adaptive.py) applies them over a `LimiterStore` that holds the
state: in this process (memory.py, the reference implementation of these rules),
in PostgreSQL (postgres.py, in SQL) or in Redis (redis.py, in Lua), the last two
shared by every gateway replica. Standard library only.

The rules, the same for every store:
- A budget is kept per *bucket*: provider + model family (`LimiterSettings.families` maps
  model ids to families, default: the model id itself), plus the tenant when `per_tenant`.
- Admission is a sliding-window log: each admitted reservation is an entry (time, tokens).
  A request of n tokens is admitted only if the entries of the last `span_seconds` plus n
  fit the current budget B. `span_seconds` is the window plus a small guard (the spread of
  delays between our admission and the provider's receipt), so at no moment can any
  window of `window_seconds` hold more than B admitted tokens, as the provider sees them.
  A token bucket would admit up to 2B in one window (a full bucket, then its refill): not used.
- n > B fails at once (RESOURCE_EXHAUSTED/RATE_LIMITED; RetryInfo of one window, by which
  time probing may have raised B), and n > max_tokens can never fit (no RetryInfo, the
  message says so). Otherwise the request waits, polling, until it fits or its max wait
  ends; it fails early when even the most favourable expiry (in-flight reservations settled
  to nothing) comes too late. The error carries that lower bound as retry_after_seconds.
- Settling rewrites the entry's tokens with the provider's reported input tokens (None:
  keeps the reservation); the entry stays in the log until it leaves the span.
- Adaptive: a provider rate-limit halves B (not below floor_tokens); a success raises B by
  `probe_fraction` of max_tokens (not above it). After a halving, neither happens again for
  `cooldown_seconds`: the 429s of one burst are one episode (one halving), and probing
  does not undo a halving at once.

Times come from the store's clock (the process's monotonic clock, the database's, Redis
TIME), so replicas sharing a store agree. A store that cannot be reached fails admission
closed (UNAVAILABLE/DEPENDENCY_UNAVAILABLE); failed settles and outcomes are logged only.
"""

from __future__ import annotations

import fnmatch
import math
from dataclasses import dataclass
from typing import Protocol

#: The tenant of a key that names none ("" = default), as `agentrt.mesh.context` names it.
DEFAULT_TENANT = "default"
#: The limiter backends `build_limiter` knows.
BACKENDS = ("memory", "postgres", "redis")


@dataclass(frozen=True)
class LimiterKey:
    """What a call is charged to (mapped to a bucket by `LimiterSettings.bucket`).

    Attributes:
        tenant: the tenant charged ("" = default).
        provider: provider key, e.g. "openai".
        model: the provider's model id.
    """

    tenant: str
    provider: str
    model: str


@dataclass(frozen=True)
class Reservation:
    """Tokens held for one call.

    Attributes:
        key: what the call is charged to.
        tokens: input tokens reserved (an exact count or an upper bound).
        waited_seconds: how long admission waited, in seconds.
        bucket: the budget's bucket key.
        entry_id: the log entry to settle.
    """

    key: LimiterKey
    tokens: int
    waited_seconds: float
    bucket: str = ""
    entry_id: str = ""


def parse_families(text: str) -> tuple[tuple[str, str], ...]:
    """Parse "pattern=family,pattern=family" (fnmatch patterns over model ids) in order.

    Raises:
        ValueError: an entry without "=" or with an empty side.
    """
    out: list[tuple[str, str]] = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        pattern, sep, family = (s.strip() for s in item.partition("="))
        if not sep or not pattern or not family:
            raise ValueError(f"model family entry {item!r} is not PATTERN=FAMILY")
        out.append((pattern, family))
    return tuple(out)


@dataclass(frozen=True)
class LimiterSettings:
    """How budgets are kept (all token figures are input tokens per window).

    Attributes:
        initial_tokens: a new bucket's budget.
        max_tokens: the most probing may raise a budget to.
        floor_tokens: the least halving may cut a budget to.
        window_seconds: the window the budget is per, in seconds (60: tokens per minute).
        guard_seconds: extra seconds an entry counts for, covering the spread of delays
            between our admission and the provider's receipt of the request.
        per_tenant: one budget per tenant instead of one shared by all tenants.
        families: (fnmatch pattern over model ids, family), first match wins; unmatched
            models are their own family.
        probe_fraction: a success raises the budget by this fraction of max_tokens.
        cooldown_seconds: after a halving, no further halving or probing for this long.
        poll_seconds: how often a waiting request looks again when the wait is unknown
            (in-flight reservations may settle smaller at any time), in seconds.
        exact_count: count OpenAI Responses requests with the provider's input-token
            endpoint before reserving, instead of reserving an upper bound.
        namespace: prefix of the bucket keys in a shared store.
        store_timeout_seconds: the longest one store operation may take, in seconds: the
            PostgreSQL connect and statement timeouts, Redis's socket timeouts, and the
            bound `AdaptiveTokenLimiter` puts on every call into its store.
    """

    initial_tokens: int = 4_000_000
    max_tokens: int = 4_000_000
    floor_tokens: int = 400_000
    window_seconds: float = 60.0
    guard_seconds: float = 1.0
    per_tenant: bool = False
    families: tuple[tuple[str, str], ...] = ()
    probe_fraction: float = 0.02
    cooldown_seconds: float = 5.0
    poll_seconds: float = 0.1
    exact_count: bool = False
    namespace: str = "agentrt"
    store_timeout_seconds: float = 5.0

    def __post_init__(self) -> None:
        """Check the figures agree.

        Raises:
            ValueError: floor > initial, initial > max, a budget below 1, a window <= 0,
                a negative guard/cooldown, poll <= 0 (any of these four NaN or infinite),
                a probe fraction outside (0, 1], or a store timeout <= 0.
        """
        if not 1 <= self.floor_tokens <= self.initial_tokens <= self.max_tokens:
            raise ValueError(
                "limiter budgets must satisfy 1 <= floor <= initial <= max tokens per window; got "
                f"floor={self.floor_tokens} initial={self.initial_tokens} max={self.max_tokens}"
            )
        # Written as what must hold, so NaN (which fails every comparison) is refused too:
        # a NaN window counted no entry, and the budget admitted without bound.
        if not (0 < self.window_seconds < math.inf):
            raise ValueError(f"limiter window must be > 0 s and finite, got {self.window_seconds}")
        if not (0 <= self.guard_seconds < math.inf and 0 <= self.cooldown_seconds < math.inf):
            raise ValueError(
                "limiter guard and cooldown >= 0 s and finite; got "
                f"guard={self.guard_seconds} cooldown={self.cooldown_seconds}"
            )
        if not (0 < self.poll_seconds < math.inf) or not 0 < self.probe_fraction <= 1:
            raise ValueError("limiter poll must be > 0 s and probe fraction in (0, 1]")
        if not (self.store_timeout_seconds > 0 and math.isfinite(self.store_timeout_seconds)):
            raise ValueError(f"limiter store timeout must be > 0 s, got {self.store_timeout_seconds}")

    @property
    def span_seconds(self) -> float:
        """How long an entry counts against its budget, in seconds (window + guard)."""
        return self.window_seconds + self.guard_seconds

    @property
    def probe_tokens(self) -> int:
        """How much one success raises a budget, in tokens (at least 1)."""
        return max(1, round(self.max_tokens * self.probe_fraction))

    def family(self, model: str) -> str:
        """Return model's family: the first matching pattern's, else the model id."""
        for pattern, family in self.families:
            if fnmatch.fnmatchcase(model, pattern):
                return family
        return model

    def bucket(self, key: LimiterKey) -> str:
        """Return the bucket key: "namespace:provider:family" (+ ":tenant" when per_tenant)."""
        base = f"{self.namespace}:{key.provider}:{self.family(key.model)}"
        return f"{base}:{key.tenant or DEFAULT_TENANT}" if self.per_tenant else base


@dataclass(frozen=True)
class Attempt:
    """What one atomic reservation attempt found.

    Attributes:
        admitted: whether the entry was written.
        budget_tokens: the bucket's current budget.
        used_tokens: tokens in the span before this attempt.
        pending_tokens: the part of used_tokens not yet settled.
        wait_seconds: when not admitted, the earliest the request could fit if every
            in-flight reservation settled to nothing (a lower bound; 0 when only in-flight
            reservations stand in the way).
    """

    admitted: bool
    budget_tokens: int
    used_tokens: int
    pending_tokens: int
    wait_seconds: float = 0.0


@dataclass(frozen=True)
class BucketState:
    """A bucket's state, for metrics and operators (read-only).

    Attributes:
        bucket: the bucket key.
        provider: provider key.
        family: model family.
        tenant: the tenant ("" when budgets are not per tenant: one bucket for all).
        budget_tokens: current budget, in input tokens per window.
        used_tokens: tokens of the entries in the span, as observed `age_seconds` ago.
        pending_tokens: the part of used_tokens not yet settled.
        window_seconds: the window, in seconds.
        age_seconds: how long ago used and pending were read from the store, in seconds
            (0 for a state just read).
    """

    bucket: str
    provider: str
    family: str
    tenant: str
    budget_tokens: int
    used_tokens: int
    pending_tokens: int
    window_seconds: float
    age_seconds: float = 0.0


class LimiterStore(Protocol):
    """Where a limiter keeps budgets and logs; every method is one atomic step."""

    async def prepare(self) -> None:
        """Create or migrate what the store needs (the server's ready hook)."""
        ...

    async def try_reserve(self, bucket: str, entry_id: str, tokens: int) -> Attempt:
        """Prune the span, then admit `tokens` as entry_id if they fit (see Attempt).

        Idempotent on entry_id: an entry already admitted (an earlier attempt whose answer
        was lost) is answered admitted again and counted once.
        """
        ...

    async def settle(self, bucket: str, entry_id: str, tokens: int | None) -> None:
        """Mark the entry settled with tokens (None: keep its size); no-op once pruned."""
        ...

    async def outcome(self, bucket: str, rate_limited: bool) -> int:
        """Adapt the budget (see `adapt`) and return it."""
        ...

    async def read(self, bucket: str) -> tuple[int, int, int]:
        """Return (budget, used, pending) tokens of the bucket now."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


def adapt(
    budget: int, backoff_at: float | None, now: float, rate_limited: bool, settings: LimiterSettings
) -> tuple[int, float | None]:
    """Return (budget, backoff_at) after one call's outcome (see the module docstring).

    Args:
        budget: current budget, in tokens.
        backoff_at: when the budget was last halved (store clock, seconds), None if never.
        now: the store clock, in seconds.
        rate_limited: the provider throttled the call.
        settings: floor, max, probe step and cooldown.
    """
    if backoff_at is not None and now - backoff_at < settings.cooldown_seconds:
        return budget, backoff_at
    if rate_limited:
        return max(settings.floor_tokens, budget // 2), now
    return min(settings.max_tokens, max(settings.floor_tokens, budget + settings.probe_tokens)), backoff_at


def admission_wait(
    entries: list[tuple[float, int, bool]], tokens: int, budget: int, span: float, now: float
) -> float:
    """Return the earliest wait (seconds) after which tokens could fit, in the best case.

    Args:
        entries: (time, tokens, settled) of the span's entries, oldest first.
        tokens: the request's tokens (<= budget).
        budget: the current budget.
        span: how long an entry counts, in seconds.
        now: the store clock, in seconds.

    Returns:
        0 when the settled entries leave room (only in-flight reservations are in the
        way); else the time until enough settled entries expire.
    """
    excess = sum(n for _, n, settled in entries if settled) + tokens - budget
    if excess <= 0:
        return 0.0
    freed = 0
    for at, n, settled in entries:
        if settled:
            freed += n
            if freed >= excess:
                return max(0.0, at + span - now)
    return span
