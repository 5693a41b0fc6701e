"""core/policy.py: allow/deny semantics, fail-closed compilation, exec_command argument decoding."""

from __future__ import annotations

import json

import pytest

from agentrt.core.policy import (
    AGENT,
    MAX_PATTERN_CHARS,
    MAX_PATTERNS,
    SERVICE,
    PatternError,
    check_command,
    check_exec_call,
    compile_policy,
    exec_arguments_problem,
    validate_patterns,
)


def test_empty_policy_allows_everything():
    policy = compile_policy(origin=AGENT)
    assert policy.empty
    assert policy.check("rm -rf /") is None
    assert check_command("anything", []) is None


def test_allow_needs_one_match_search_semantics():
    policy = compile_policy([r"^git ", r"\bls\b"], origin=AGENT)
    assert policy.check("git status") is None
    assert policy.check("cd src && ls -la") is None  # searched anywhere, not matched at the start
    refusal = policy.check("make")
    assert refusal is not None and refusal.rule == "allow" and refusal.index == -1
    assert '"^git "' in refusal.message and '"\\bls\\b"' in refusal.message
    assert refusal.details() == {"reason": "POLICY_DENIED", "rule": "allow", "policy": "agent"}


def test_deny_wins_and_names_its_pattern():
    policy = compile_policy([r"^git "], [r"push\s+--force", r"reset --hard"], origin=SERVICE)
    assert policy.check("git push origin main") is None
    refusal = policy.check("git reset --hard HEAD~3")
    assert refusal is not None
    assert (refusal.rule, refusal.pattern, refusal.index, refusal.origin) == (
        "deny",
        "reset --hard",
        1,
        SERVICE,
    )
    assert "tool service's command policy" in refusal.message and '"reset --hard"' in refusal.message
    assert refusal.details()["pattern_index"] == 1


def test_it_is_a_text_filter_not_a_boundary():
    # Documented blind spots (004 §2.7j): the policy sees text, not what bash will run.
    policy = compile_policy(deny=[r"rm -rf"], origin=AGENT)
    assert policy.check("rm -rf /") is not None
    for bypass in ("rm -fr /", "rm  -rf /", "eval $(echo cm0gLXJm | base64 -d)"):
        assert policy.check(bypass) is None


def test_uncompilable_pattern_fails_closed():
    policy = compile_policy([r"^ok$"], [r"(unclosed", r"fine"], origin=AGENT)
    assert policy.broken is not None and not policy.empty
    for cmd in ("ok", "", "anything"):
        refusal = policy.check(cmd)
        assert refusal is not None and refusal.rule == "invalid"
        assert refusal.pattern == "(unclosed" and refusal.index == 0
        assert "does not compile" in refusal.message and "every command" in refusal.message


def test_validate_patterns_names_the_first_bad_one():
    validate_patterns(["a", "b+"], ["c"])
    with pytest.raises(PatternError) as info:
        validate_patterns(["good", "[z-a]"], ["(also bad"])
    assert (info.value.rule, info.value.index, info.value.pattern) == ("allow", 1, "[z-a]")
    with pytest.raises(PatternError) as info:
        validate_patterns([], ["x" * (MAX_PATTERN_CHARS + 1)])
    assert info.value.rule == "deny" and "longer" in info.value.error
    with pytest.raises(PatternError):
        validate_patterns(["a"] * (MAX_PATTERNS + 1), [])


def test_several_policies_each_must_pass():
    service = compile_policy(deny=["sudo"], origin=SERVICE)
    agent = compile_policy(allow=["^make"], origin=AGENT)
    assert check_command("make test", [service, agent]) is None
    first = check_command("sudo make", [service, agent])
    assert first is not None and first.origin == SERVICE
    second = check_command("ls", [service, agent])
    assert second is not None and second.origin == AGENT


@pytest.mark.parametrize(
    "args,problem",
    [
        ({}, "required"),
        ({"cmd": None}, "required"),
        ({"cmd": 5}, "must be a string"),
        ({"cmd": ""}, "must not be empty"),
        ({"cmd": "ls", "workdir": True}, '"workdir"'),
        ({"cmd": "ls", "workdir": 42}, '"workdir"'),
        ({"cmd": "ls", "session_id": 3.14}, '"session_id"'),
        ({"cmd": "ls", "session_id": {}}, '"session_id"'),
        ({"cmd": "ls", "timeout_ms": 0}, "at least 1"),
        ({"cmd": "ls", "timeout_ms": 1.5}, "integer"),
        ({"cmd": "ls", "timeout_ms": True}, "integer"),
    ],
)
def test_exec_arguments_refused(args, problem):
    found = exec_arguments_problem(args)
    assert found is not None and problem in found


@pytest.mark.parametrize(
    "args",
    [
        {"cmd": "ls"},
        {"cmd": "ls", "workdir": None, "session_id": 0},
        {"cmd": "ls", "workdir": False, "session_id": "0"},
        {"cmd": "ls", "workdir": "src", "timeout_ms": 1000, "extra": [1]},
        {"cmd": "ls", "timeout_ms": 2.0},
    ],
)
def test_exec_arguments_accepted(args):
    assert exec_arguments_problem(args) is None


def test_check_exec_call_decodes_the_argument_string_as_the_tool_does():
    deny = [compile_policy(deny=["curl"], origin=AGENT)]
    assert check_exec_call(json.dumps({"cmd": "ls"}), deny) is None
    assert check_exec_call(json.dumps({"cmd": "curl x"}), deny).rule == "deny"  # type: ignore[union-attr]
    for text in ("", "null", "  ", "[1, 2]", '"ls"', "{not json", json.dumps({"cmd": "ls", "workdir": True})):
        refusal = check_exec_call(text, deny)
        assert refusal is not None and refusal.rule == "arguments", text
        assert refusal.details() == {"reason": "INVALID_ARGUMENTS", "rule": "arguments"}
    # arguments are checked before the policy: a broken call is refused as a broken call
    assert check_exec_call(json.dumps({"cmd": "curl", "workdir": 7}), deny).rule == "arguments"  # type: ignore[union-attr]
