"""Input-token limiter benchmark (issue 4): figures written to a file, never asserted.

For each store (memory; PostgreSQL and Redis when reachable):
- accuracy under overload: three limiters over the store (three replicas; on memory one
  process's limiter) and 24 concurrent callers reserving 50-500 tokens each, settled at
  30-100% of the reservation (upper bounds that the provider's usage corrects), against a
  budget of 20,000 tokens per 2 s window, for 8 s. Reported: the most tokens admitted in
  any 2 s window (by admission time as the callers see it, i.e. after the store's answer
  came back, as a provider would) against the budget, the share of the budget used over
  the run, admitted / refused calls. The guard is 0.25 s (production: 1 s per 60 s): it
  absorbs the spread between the store's admission time and the caller's;
- reserve latency: p50/p99 of one reserve + settle, alone (1 caller) and under contention
  (16 callers on one bucket over 3 replicas), in milliseconds.
For contrast, the same overload against a plain token bucket of the same rate shows why
the limiter does not use one (it admits up to twice the budget in one window).

Usage: python tests/bench/bench_limiter.py OUT.json
(default $AGENTRT_BENCH_DIR/limiter.json, else bench-results/limiter.json)
"""

from __future__ import annotations

import asyncio
import json
import os
import pathlib
import random
import sys
import time
import uuid

from agentrt.core.errors import MeshError
from agentrt.gateway.limiter import AdaptiveTokenLimiter, LimiterKey, LimiterSettings, build_limiter
from agentrt.gateway.limiter.memory import MemoryStore
from tests.stores import PG_URL, REDIS_URL

STORES = {
    "memory": "",
    "postgres": PG_URL,
    "redis": REDIS_URL,
}
KEY = LimiterKey("bench", "openai", "gpt-bench")
WINDOW = 2.0
BUDGET = 20_000
RUN = 8.0
GUARD = 0.25
CALLERS = 24


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


async def _replicas(backend: str, n: int, **figures: object) -> list[AdaptiveTokenLimiter]:
    settings = LimiterSettings(namespace="bench-" + uuid.uuid4().hex[:12], **figures)  # type: ignore[arg-type]
    if backend == "memory":
        store = MemoryStore(settings)
        limiters = [AdaptiveTokenLimiter(store, settings) for _ in range(n)]
    else:
        limiters = [build_limiter(backend, STORES[backend], settings) for _ in range(n)]
    for limiter in limiters:
        await limiter.prepare()
    return limiters


def _windows(admitted: list[tuple[float, int]]) -> int:
    return max((sum(n for t, n in admitted if end - WINDOW < t <= end) for end, _ in admitted), default=0)


async def _overload(reserve, settle) -> dict:
    admitted: list[tuple[float, int]] = []
    refused = 0
    end = time.monotonic() + RUN

    async def caller(seed: int) -> None:
        nonlocal refused
        rng = random.Random(seed)
        while time.monotonic() < end:
            tokens = rng.randint(50, 500)
            try:
                handle = await reserve(seed, tokens)
            except MeshError:
                refused += 1
                await asyncio.sleep(0.01)
                continue
            used = max(1, int(tokens * rng.uniform(0.3, 1.0)))
            admitted.append((time.monotonic(), used))
            await asyncio.sleep(rng.uniform(0.0, 0.02))  # the provider call
            await settle(handle, used)

    await asyncio.gather(*(caller(i) for i in range(CALLERS)))
    most = _windows(admitted)
    return {
        "budget_tokens_per_window": BUDGET,
        "window_seconds": WINDOW,
        "guard_seconds": GUARD,
        "max_tokens_in_any_window": most,
        "max_window_over_budget": round(most / BUDGET, 3),
        "budget_used_share": round(sum(n for _, n in admitted) / (BUDGET * RUN / WINDOW), 3),
        "admitted_calls": len(admitted),
        "refused_calls": refused,
    }


async def _accuracy(backend: str) -> dict:
    figures = {"initial_tokens": BUDGET, "max_tokens": BUDGET, "floor_tokens": 1000}
    limiters = await _replicas(
        backend, 3, window_seconds=WINDOW, guard_seconds=GUARD, poll_seconds=0.02, **figures
    )
    try:

        async def reserve(seed: int, tokens: int):
            return await limiters[seed % 3].reserve(KEY, tokens, 0.5)

        async def settle(handle, used: int) -> None:
            await limiters[0].settle(handle, used)

        return await _overload(reserve, settle)
    finally:
        for limiter in limiters:
            await limiter.close()


async def _token_bucket() -> dict:
    """The same overload against a token bucket of BUDGET per WINDOW (contrast only)."""
    rate, state = BUDGET / WINDOW, {"balance": float(BUDGET), "at": time.monotonic()}

    async def reserve(seed: int, tokens: int):
        now = time.monotonic()
        state["balance"] = min(BUDGET, state["balance"] + (now - state["at"]) * rate)
        state["at"] = now
        if state["balance"] < tokens:
            raise MeshError("RESOURCE_EXHAUSTED", "RATE_LIMITED", "bucket empty")  # type: ignore[arg-type]
        state["balance"] -= tokens
        return tokens

    async def settle(handle, used: int) -> None:
        state["balance"] = min(BUDGET, state["balance"] + handle - used)

    return await _overload(reserve, settle)


async def _latency(backend: str) -> dict:
    limiters = await _replicas(backend, 3, initial_tokens=10**9, max_tokens=10**9, floor_tokens=1)
    out: dict = {}
    try:

        async def one(limiter: AdaptiveTokenLimiter, samples: list[float]) -> None:
            start = time.perf_counter()
            reservation = await limiter.reserve(KEY, 100, 0)
            samples.append((time.perf_counter() - start) * 1000)
            await limiter.settle(reservation, 80)

        for _ in range(20):  # warm the pools
            await one(limiters[0], [])
        alone: list[float] = []
        for _ in range(500):
            await one(limiters[0], alone)
        out["reserve_ms_1_caller"] = {"p50": _pct(alone, 0.5), "p99": _pct(alone, 0.99)}
        contended: list[float] = []

        async def caller(i: int) -> None:
            for _ in range(60):
                await one(limiters[i % 3], contended)

        start = time.perf_counter()
        await asyncio.gather(*(caller(i) for i in range(16)))
        out["reserve_ms_16_callers_3_replicas"] = {
            "p50": _pct(contended, 0.5),
            "p99": _pct(contended, 0.99),
            "reserves_per_second": round(len(contended) / (time.perf_counter() - start)),
        }
    finally:
        for limiter in limiters:
            await limiter.close()
    return out


async def _reachable(backend: str) -> bool:
    if backend == "memory":
        return True
    limiter = build_limiter(backend, STORES[backend], LimiterSettings())
    try:
        await asyncio.wait_for(limiter.prepare(), 5)
        return True
    except Exception:  # noqa: BLE001 - anything means "not here"
        return False
    finally:
        await limiter.close()


async def main(out_path: pathlib.Path) -> None:
    results: dict = {"stores": {}}
    for backend in STORES:
        if not await _reachable(backend):
            results["stores"][backend] = {"skipped": "not reachable"}
            continue
        results["stores"][backend] = {"accuracy": await _accuracy(backend), **(await _latency(backend))}
    results["token_bucket_contrast"] = await _token_bucket()
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    default = pathlib.Path(os.environ.get("AGENTRT_BENCH_DIR", "bench-results")) / "limiter.json"
    asyncio.run(main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else default))
