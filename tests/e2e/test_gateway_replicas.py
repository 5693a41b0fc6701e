"""Three gateway processes share one input-token budget through PostgreSQL, and through Redis.

One provider emulator process in rate-limit mode (its own limit above the gateways'
budget) serves the three replicas (`python -m agentrt.gateway`); several clients drive
concurrent Generate calls through all three, more than the budget allows, for about two
and a half windows (a 5 s window, set by AGENTRT_LIMITER_WINDOW_SECONDS, keeps it short).
The emulator's own log of received requests and its own token counts is the judge:
- in no window did the provider receive more tokens than the configured budget;
- a substantial share of the budget was used (the limiter admits, not only refuses);
- no caller saw a provider 429: the gateways refused on their own (RESOURCE_EXHAUSTED
  with ErrorInfo metadata limiter=gateway) before the provider had to.
Provider retries are off (AGENTRT_GATEWAY_MAX_RETRIES=0), so a provider 429 could not hide.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import grpc
import pytest
from e2e_helpers import wait_for
from grpc_health.v1 import health_pb2, health_pb2_grpc

from agentrt.mesh.status import details_of
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc
from tests.needs import unavailable
from tests.ports import free_ports
from tests.stores import PG_URL, REDIS_URL

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
WINDOW = 5.0
GUARD = 1.0  # the default AGENTRT_LIMITER_GUARD_SECONDS
BUDGET = 24_000  # input tokens per window, all replicas together
EMULATOR_LIMIT = 36_000  # the provider's own limit, above the budget
RUN_SECONDS = 12.5
CLIENTS_PER_REPLICA = 2
WORKERS_PER_CLIENT = 6
STORES = {
    "postgres": PG_URL,
    "redis": REDIS_URL,
}


def _reachable(backend: str) -> bool:
    import socket

    port = 5432 if backend == "postgres" else 6379
    with socket.socket() as sock:
        sock.settimeout(2)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _start_emulator(tmp_path: Path) -> tuple[subprocess.Popen, str]:
    args = ["--port", "0", "--rate-limit-tokens", str(EMULATOR_LIMIT), "--rate-limit-window", str(WINDOW)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.emulators.providers", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=open(tmp_path / "emulator.err", "wb"),  # noqa: SIM115 - closed with the process
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    line = proc.stdout.readline() if proc.stdout else ""
    assert line.startswith("provider emulator listening on "), line
    return proc, line.rsplit(" ", 1)[1].strip()


def _start_gateway(
    tmp_path: Path, i: int, port: int, base_url: str, backend: str, ns: str
) -> subprocess.Popen:
    env = {
        **os.environ,
        "AGENTRT_GATEWAY_PORT": str(port),
        "AGENTRT_OPENAI_BASE_URL": base_url + "/v1",
        "AGENTRT_OPENAI_API_KEY": "test-key",
        "AGENTRT_DEFAULT_MODEL": "openai:gpt-emu",
        "AGENTRT_LOCAL_MODEL_PATH": str(tmp_path / "no-local-model.gguf"),
        "AGENTRT_GATEWAY_MAX_RETRIES": "0",
        "AGENTRT_LIMITER_BACKEND": backend,
        "AGENTRT_LIMITER_URL": STORES[backend],
        "AGENTRT_LIMITER_TOKENS_PER_MINUTE": str(BUDGET),
        "AGENTRT_LIMITER_WINDOW_SECONDS": str(WINDOW),
        "AGENTRT_LIMITER_NAMESPACE": ns,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "agentrt.gateway"],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=open(tmp_path / f"gateway{i}.out", "wb"),  # noqa: SIM115
        stderr=open(tmp_path / f"gateway{i}.err", "wb"),  # noqa: SIM115
        env=env,
    )


def _serving(address: str) -> bool:
    try:
        with grpc.insecure_channel(address) as channel:
            check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
    except grpc.RpcError:
        return False
    return check.status == health_pb2.HealthCheckResponse.SERVING


def _request(rng: random.Random) -> pb.GenerateRequest:
    words = " ".join(
        rng.choice(["tokens", "budget", "window", "replica", "gateway"]) for _ in range(rng.randint(40, 400))
    )
    message = c.Message(role=c.ROLE_USER, content=[c.ContentBlock(text=c.TextBlock(text=words))])
    request = pb.ModelRequest(
        model=c.ModelRef(provider="openai"), system="Answer briefly.", messages=[message]
    )
    request.max_queue_wait.FromSeconds(2)
    return pb.GenerateRequest(request=request)


async def _drive(addresses: list[str], seconds: float) -> dict[str, list]:
    """Run the clients for `seconds`; return the outcomes by kind."""
    seen: dict[str, list] = {"ok": [], "gateway_limited": [], "provider_429": [], "other": []}
    channels = [grpc.aio.insecure_channel(a) for a in addresses for _ in range(CLIENTS_PER_REPLICA)]
    end = time.monotonic() + seconds

    async def worker(stub: pb_grpc.ModelGatewayServiceStub, seed: int) -> None:
        rng = random.Random(seed)
        while time.monotonic() < end:
            try:
                out = await stub.Generate(_request(rng), timeout=10)
                seen["ok"].append(out.response.usage.input_tokens)
            except grpc.aio.AioRpcError as err:
                reason, metadata, retry_after = details_of(err)
                if err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and metadata.get("limiter") == "gateway":
                    seen["gateway_limited"].append(retry_after)
                    await asyncio.sleep(min(retry_after or 0.1, 0.5))  # a client backs off a little
                elif metadata.get("http_status") == "429":
                    seen["provider_429"].append(err.details())
                else:
                    seen["other"].append(f"{err.code()} {reason} {err.details()}")

    try:
        stubs = [pb_grpc.ModelGatewayServiceStub(ch) for ch in channels]
        await asyncio.gather(
            *(worker(s, i * 100 + j) for i, s in enumerate(stubs) for j in range(WORKERS_PER_CLIENT))
        )
    finally:
        for ch in channels:
            await ch.close()
    return seen


def _intake(base_url: str) -> list[dict]:
    with urllib.request.urlopen(base_url + "/_emulator/intake", timeout=10) as resp:
        return json.loads(resp.read())["requests"]


class Stack:
    """One emulator process and three gateway replicas sharing one store."""

    def __init__(self, tmp_path: Path, backend: str) -> None:
        self.backend = backend
        self.dir = tmp_path / backend
        self.dir.mkdir()
        self.emulator, self.base_url = _start_emulator(self.dir)
        self.ports = free_ports(3)
        namespace = f"e2e-{uuid.uuid4().hex[:12]}"
        self.gateways = [
            _start_gateway(self.dir, i, port, self.base_url, backend, namespace)
            for i, port in enumerate(self.ports)
        ]
        self.addresses = [f"127.0.0.1:{port}" for port in self.ports]

    def wait_serving(self) -> None:
        for i, (proc, address) in enumerate(zip(self.gateways, self.addresses, strict=True)):

            def up(proc: subprocess.Popen = proc, address: str = address, i: int = i) -> bool:
                assert proc.poll() is None, (self.dir / f"gateway{i}.err").read_text()
                return _serving(address)

            wait_for(up, f"{self.backend} gateway replica {i} serving", timeout=90)

    def stop(self) -> None:
        procs = [*self.gateways, self.emulator]
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def check(self, seen: dict[str, list]) -> None:
        """Assert the run's outcome from the emulator's own log (see the module docstring)."""
        received = _intake(self.base_url)
        assert seen["other"] == [] and seen["provider_429"] == []
        assert [r for r in received if not r["accepted"]] == []  # the provider never had to refuse
        assert seen["gateway_limited"], "demand never exceeded the budget: the test proves nothing"
        accepted = [(r["time"], r["tokens"]) for r in received]
        assert sorted(n for _, n in accepted) == sorted(seen["ok"])
        windows = [sum(n for t, n in accepted if end - WINDOW < t <= end) for end, _ in accepted]
        assert max(windows) <= BUDGET, (
            f"{self.backend}: a window received {max(windows)} tokens, budget {BUDGET}"
        )
        # Substantial use: over the run the replicas admitted more than one full budget, and
        # some window came close to it (what is left is the slack of upper-bound reservations).
        total = sum(n for _, n in accepted)
        assert total > 1.2 * BUDGET and max(windows) > 0.6 * BUDGET, (self.backend, total, max(windows))


def test_three_replicas_admit_no_more_than_one_budget_per_window(tmp_path):
    backends = [b for b in STORES if _reachable(b)]
    missing = sorted(set(STORES) - set(backends))
    if not backends:
        unavailable(f"{' and '.join(missing)} not reachable on 127.0.0.1")
    stacks: list[Stack] = []
    try:
        # Both stacks start together and run side by side: the test takes one run, not two.
        for backend in backends:
            stacks.append(Stack(tmp_path, backend))
        for stack in stacks:
            stack.wait_serving()

        async def drive_all() -> list[dict[str, list]]:
            return await asyncio.gather(*(_drive(stack.addresses, RUN_SECONDS) for stack in stacks))

        outcomes = asyncio.run(drive_all())
        for stack, seen in zip(stacks, outcomes, strict=True):
            stack.check(seen)
    finally:
        for stack in stacks:
            stack.stop()
    if missing:
        unavailable(f"{' and '.join(missing)} not reachable on 127.0.0.1 (the others passed)")
