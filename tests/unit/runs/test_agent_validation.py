"""The run loop's list of model providers stays the gateway's."""

from __future__ import annotations

from agentrt.gateway.gateway import KNOWN_PROVIDERS as GATEWAY_PROVIDERS
from agentrt.runs.spec.agents import KNOWN_PROVIDERS


def test_known_providers_match_the_gateway():
    assert set(KNOWN_PROVIDERS) == set(GATEWAY_PROVIDERS)


def test_max_tool_concurrency_zero_is_unlimited():
    from agentrt.core.tool_args import batch_concurrency
    from agentrt.runs.spec.agents import UNLIMITED_CONCURRENCY, limits_of
    from agentrt.v1 import run_service_pb2 as pb

    assert limits_of(pb.AgentSpec()).concurrency == UNLIMITED_CONCURRENCY
    assert limits_of(pb.AgentSpec(limits=pb.AgentLimits(max_tool_concurrency=3))).concurrency == 3
    # every runnable call of a 40-call batch at once, unless one tool is sequential
    assert batch_concurrency(0, 40, any_sequential=False) == 40
    assert batch_concurrency(3, 40, any_sequential=False) == 3
    assert batch_concurrency(0, 40, any_sequential=True) == 1
    assert batch_concurrency(0, 0, any_sequential=False) == 1


def test_an_agent_tool_sequential_override_reaches_the_offered_spec():
    from agentrt.runs.spec.agents import offered_specs
    from agentrt.v1 import common_pb2 as cpb
    from agentrt.v1 import run_service_pb2 as pb

    snap = pb.AgentSpec(
        tools=[
            pb.AgentTool(name="a", spec=cpb.ToolSpec(name="a", sequential=False), sequential=True),
            pb.AgentTool(name="b", spec=cpb.ToolSpec(name="b", sequential=True), sequential=False),
            pb.AgentTool(name="c", spec=cpb.ToolSpec(name="c", sequential=True)),
        ]
    )
    assert [s.sequential for s in offered_specs(snap)] == [True, False, True]


def test_an_agent_tool_is_offered_with_the_input_schema():
    import json

    from agentrt.core.agent_tools import PARAMETERS
    from agentrt.runs.spec.agents import snapshot
    from agentrt.v1 import common_pb2 as cpb
    from agentrt.v1 import run_service_pb2 as pb

    spec = pb.AgentSpec(tools=[pb.AgentTool(name="ask_billing", agent_name="billing")])
    snap = snapshot(spec, "openai:gpt-test", {"read_file": cpb.ToolSpec(name="read_file")})
    tool = snap.tools[0].spec
    assert (tool.name, json.loads(tool.parameters_json_schema)) == ("ask_billing", PARAMETERS)
    assert tool.description == "Ask the agent billing and get its final answer."


def test_run_sandbox_rules_are_the_tool_services():
    from agentrt.runs.spec import validation
    from agentrt.tools.sandbox import manager as sandboxes

    assert validation.ENV_NAME.pattern == sandboxes._ENV_NAME.pattern
    assert {k: v.pattern for k, v in validation.DOCKER_FIELDS.items()} == {
        k: v.pattern for k, v in sandboxes._DOCKER_FIELDS.items()
    }
