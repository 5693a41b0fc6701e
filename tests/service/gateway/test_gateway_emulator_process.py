"""The emulator as its own process (`python -m tests.emulators.providers`), driving a gateway."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
from gateway_helpers import emulator_config, generate

from agentrt.gateway.server import build_server
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc

ROOT = Path(__file__).resolve().parents[3]


class _Addr:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url


@pytest.fixture
def emulator_process(tmp_path):
    script = tmp_path / "replies.json"
    script.write_text(
        json.dumps(
            [
                {"tool_calls": [{"name": "exec_command", "arguments": '{"cmd": "echo hi > out.txt"}'}]},
                {"status": 429, "retry_after": 0.01},
                {"text": "done", "input_tokens": 12, "output_tokens": 3},
            ]
        )
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.emulators.providers", "--port", "0", "--script", str(script)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        line = proc.stdout.readline()  # the process prints its address once it listens
        assert line.startswith("provider emulator listening on "), line
        yield line.rsplit(" ", 1)[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


async def test_scripted_process_serves_a_gateway(start_server, emulator_process):
    address = await start_server(build_server(emulator_config(_Addr(emulator_process))))  # type: ignore[arg-type]
    async with grpc.aio.insecure_channel(address) as channel:
        stub = pb_grpc.ModelGatewayServiceStub(channel)
        first = (await stub.Generate(generate("anthropic"))).response
        assert first.content[0].tool_use.arguments == '{"cmd": "echo hi > out.txt"}'
        second = await stub.Generate(generate("openai"))
        assert second.retries == 1 and second.response.content[0].text.text == "done"

    def control() -> list[dict]:
        body = json.dumps([{"text": "more"}]).encode()
        urllib.request.urlopen(urllib.request.Request(emulator_process + "/_emulator/script", data=body))
        with urllib.request.urlopen(emulator_process + "/_emulator/requests") as resp:
            return json.loads(resp.read())

    seen = await asyncio.to_thread(control)
    assert [r["path"] for r in seen] == ["/v1/messages", "/v1/responses", "/v1/responses"]
