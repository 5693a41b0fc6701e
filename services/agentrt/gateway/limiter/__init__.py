"""The gateway's adaptive input-token limiter (seed 002 "Model Client Throughput").

Owns the rules (`rules`: buckets, the sliding-window log, halving and probing), the
limiter that applies them and waits (`adaptive.AdaptiveTokenLimiter`, `build_limiter`),
what a request it refuses is told (`refusals`), its three stores (`memory`, the embedded
default; `postgres` and `redis`, shared by every gateway replica) and what a request
reserves (`count.input_token_bound`: an upper bound of its input tokens). The public names
are re-exported here; the stores are imported from their modules. docs/services/gateway.md
"Limiter".
"""

from agentrt.gateway.limiter.adaptive import AdaptiveTokenLimiter, TokenLimiter, build_limiter
from agentrt.gateway.limiter.refusals import OverBudget
from agentrt.gateway.limiter.rules import (
    BACKENDS,
    Attempt,
    BucketState,
    LimiterKey,
    LimiterSettings,
    LimiterStore,
    Reservation,
    adapt,
    admission_wait,
    parse_families,
)

__all__ = [
    "BACKENDS",
    "AdaptiveTokenLimiter",
    "Attempt",
    "BucketState",
    "LimiterKey",
    "LimiterSettings",
    "LimiterStore",
    "OverBudget",
    "Reservation",
    "TokenLimiter",
    "adapt",
    "admission_wait",
    "build_limiter",
    "parse_families",
]
