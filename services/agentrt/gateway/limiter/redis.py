"""The Redis limiter store: budget AND consumption shared by every gateway replica.

A bucket is three keys sharing one hash tag (`{bucket}`), so they live on one slot of a
Redis Cluster and one script may touch them all:
- `{bucket}:limiter:log`: sorted set, entry id -> admission time (Redis TIME, seconds);
- `{bucket}:limiter:tok`: hash, entry id -> tokens * 2 + (1 while unsettled), plus the
  running sums `_used` and `_pending` of the entries in the log;
- `{bucket}:limiter:budget`: hash with `budget` and `backoff_at` (time of the last halving).

Each operation is ONE Lua script, so it is atomic against every replica: reserve prunes the
entries older than the span (subtracting them from the sums), then admits the entry only if
it fits (rules.py's rules, the wait computed as `admission_wait` does); settle rewrites an
unsettled entry and the sums; outcome halves or probes the budget. Every time is Redis TIME,
so replicas agree whatever their clocks. The log and the sums expire together one span
after the last write (they hold nothing older by then); an idle budget expires after a day
and starts again from the initial budget.
"""

from __future__ import annotations

from typing import Any

from agentrt.gateway.limiter.rules import Attempt, LimiterSettings

#: How long an idle bucket's adapted budget is kept, in milliseconds (one day).
BUDGET_TTL_MS = 86_400_000

_NOW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
"""
# Prune entries at or before now - span from the log, the hash and the sums.
_PRUNE = """
local span = tonumber(ARGV[1])
local horizon = string.format('%.6f', now - span)
local used = tonumber(redis.call('HGET', KEYS[2], '_used') or '0')
local pending = tonumber(redis.call('HGET', KEYS[2], '_pending') or '0')
local old = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', horizon)
for _, id in ipairs(old) do
  local v = tonumber(redis.call('HGET', KEYS[2], id) or '0')
  local n = math.floor(v / 2)
  used = used - n
  if v % 2 == 1 then pending = pending - n end
  redis.call('HDEL', KEYS[2], id)
end
if #old > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', horizon)
  redis.call('HSET', KEYS[2], '_used', used, '_pending', pending)
end
local budget = tonumber(redis.call('HGET', KEYS[3], 'budget'))
if not budget then
  budget = tonumber(ARGV[2])
  redis.call('HSET', KEYS[3], 'budget', budget)
end
redis.call('PEXPIRE', KEYS[3], ARGV[3])
"""
# ARGV: span, initial, budget ttl ms, tokens, entry id, log ttl ms
_RESERVE = (
    _NOW
    + _PRUNE
    + """
local n = tonumber(ARGV[4])
local ttl = ARGV[6]
if redis.call('HEXISTS', KEYS[2], ARGV[5]) == 1 then
  return {1, budget, used, pending, '0'}  -- a repeat of an admitted attempt: counted once
end
if n > budget then
  return {0, budget, used, pending, '0'}
end
if used + n <= budget then
  redis.call('ZADD', KEYS[1], string.format('%.6f', now), ARGV[5])
  redis.call('HSET', KEYS[2], ARGV[5], n * 2 + 1, '_used', used + n, '_pending', pending + n)
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('PEXPIRE', KEYS[2], ttl)
  return {1, budget, used, pending, '0'}
end
local excess = used - pending + n - budget
local wait = 0
if excess > 0 then
  wait = span
  local freed = 0
  local items = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
  for i = 1, #items, 2 do
    local v = tonumber(redis.call('HGET', KEYS[2], items[i]) or '0')
    if v % 2 == 0 then
      freed = freed + v / 2
      if freed >= excess then
        wait = math.max(0, tonumber(items[i + 1]) + span - now)
        break
      end
    end
  end
end
return {0, budget, used, pending, string.format('%.6f', wait)}
"""
)
# ARGV: span, initial, budget ttl ms
_READ = _NOW + _PRUNE + "\nreturn {budget, used, pending}\n"
# KEYS: log, tok. ARGV: entry id, tokens ('' keeps the reservation)
_SETTLE = """
local v = redis.call('HGET', KEYS[2], ARGV[1])
if not v then return 0 end
v = tonumber(v)
if v % 2 == 0 then return 0 end
local old = math.floor(v / 2)
local new = old
if ARGV[2] ~= '' then new = tonumber(ARGV[2]) end
local used = tonumber(redis.call('HGET', KEYS[2], '_used') or '0') + new - old
local pending = tonumber(redis.call('HGET', KEYS[2], '_pending') or '0') - old
redis.call('HSET', KEYS[2], ARGV[1], new * 2, '_used', used, '_pending', pending)
return 1
"""
# KEYS: budget. ARGV: rate limited (1/0), floor, max, step, cooldown s, initial, budget ttl ms
_OUTCOME = (
    _NOW
    + """
local budget = tonumber(redis.call('HGET', KEYS[1], 'budget') or ARGV[6])
local backoff = redis.call('HGET', KEYS[1], 'backoff_at')
if backoff and now - tonumber(backoff) < tonumber(ARGV[5]) then
  return budget
end
if ARGV[1] == '1' then
  budget = math.max(tonumber(ARGV[2]), math.floor(budget / 2))
  redis.call('HSET', KEYS[1], 'budget', budget, 'backoff_at', string.format('%.6f', now))
else
  budget = math.min(tonumber(ARGV[3]), math.max(tonumber(ARGV[2]), budget + tonumber(ARGV[4])))
  redis.call('HSET', KEYS[1], 'budget', budget)
end
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return budget
"""
)


class RedisStore:
    """Budgets and logs in Redis (see the module docstring)."""

    def __init__(self, url: str, settings: LimiterSettings) -> None:
        """Create the client (nothing connects until first use).

        Args:
            url: redis:// (or rediss://, unix://) URL.
            settings: the rules' figures.

        Raises:
            ValueError: the URL is not a Redis one.
        """
        if not url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(f"the redis limiter needs a redis:// URL, got {url!r}")
        import redis.asyncio as aioredis

        # Connect and answer within the store timeout (the limiter bounds each call too).
        timeout = settings.store_timeout_seconds
        self._redis: Any = aioredis.Redis.from_url(
            url, socket_connect_timeout=timeout, socket_timeout=timeout
        )
        self._s = settings
        self._reserve = self._redis.register_script(_RESERVE)
        self._read = self._redis.register_script(_READ)
        self._settle = self._redis.register_script(_SETTLE)
        self._outcome = self._redis.register_script(_OUTCOME)
        self._log_ttl_ms = int((settings.span_seconds + 1.0) * 1000)

    @staticmethod
    def _keys(bucket: str) -> list[str]:
        tag = "{" + bucket + "}:limiter:"
        return [tag + "log", tag + "tok", tag + "budget"]

    async def prepare(self) -> None:
        """Check that Redis answers (a gateway without its limiter store should not start)."""
        await self._redis.ping()

    async def close(self) -> None:
        """Close the connection pool."""
        await self._redis.aclose()

    async def try_reserve(self, bucket: str, entry_id: str, tokens: int) -> Attempt:
        """See LimiterStore.try_reserve: one script."""
        s = self._s
        args: list[str | int | float] = [
            s.span_seconds,
            s.initial_tokens,
            BUDGET_TTL_MS,
            tokens,
            entry_id,
            self._log_ttl_ms,
        ]
        admitted, budget, used, pending, wait = await self._reserve(keys=self._keys(bucket), args=args)
        return Attempt(bool(admitted), int(budget), int(used), int(pending), float(wait))

    async def settle(self, bucket: str, entry_id: str, tokens: int | None) -> None:
        """See LimiterStore.settle: one script."""
        args: list[str | int] = [entry_id, "" if tokens is None else tokens]
        await self._settle(keys=self._keys(bucket)[:2], args=args)

    async def outcome(self, bucket: str, rate_limited: bool) -> int:
        """See LimiterStore.outcome: one script."""
        s = self._s
        args = [
            1 if rate_limited else 0,
            s.floor_tokens,
            s.max_tokens,
            s.probe_tokens,
            s.cooldown_seconds,
            s.initial_tokens,
            BUDGET_TTL_MS,
        ]
        return int(await self._outcome(keys=self._keys(bucket)[2:], args=args))

    async def read(self, bucket: str) -> tuple[int, int, int]:
        """See LimiterStore.read (prunes the span first, like a reservation)."""
        s = self._s
        budget, used, pending = await self._read(
            keys=self._keys(bucket), args=[s.span_seconds, s.initial_tokens, BUDGET_TTL_MS]
        )
        return int(budget), int(used), int(pending)
