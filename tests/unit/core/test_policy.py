"""core/policy.py: allow/deny semantics, fail-closed compilation, exec_command argument decoding."""

from __future__ import annotations

import json
import re
import time
import warnings

import pytest

from agentrt.core.exec_args import check_exec_args, check_exec_call, exec_arguments_problem
from agentrt.core.policy import (
    AGENT,
    CHECK_BUDGET_SECONDS,
    MAX_PATTERN_CHARS,
    MAX_PATTERNS,
    SERVICE,
    TIMEOUT,
    PatternError,
    check_command,
    compile_policy,
    validate_patterns,
)

#: Exponential backtracking in `regex` (nested alternatives of the same text): without a
#: time limit, searching it in CATASTROPHIC_CMD would take longer than the universe's age.
CATASTROPHIC = r"(a|a)+$"
CATASTROPHIC_CMD = "echo " + "a" * 64 + "b"


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


def test_too_many_patterns_is_reported_as_a_count_not_as_an_empty_pattern():
    with pytest.raises(PatternError) as info:
        validate_patterns([], ["rm"] * (MAX_PATTERNS + 1))
    err = info.value
    assert (err.rule, err.index, err.pattern, err.field) == ("deny", -1, "", "deny")
    assert str(err) == f"deny: {MAX_PATTERNS + 1} patterns, more than the limit of {MAX_PATTERNS}"
    assert "does not compile" not in str(err) and '""' not in str(err)
    validate_patterns(["a"] * MAX_PATTERNS, ["b"] * MAX_PATTERNS)  # the limit itself is fine
    # a policy built anyway refuses every command, naming the count
    refusal = compile_policy(allow=["ls"] * (MAX_PATTERNS + 1), origin=AGENT).check("ls")
    assert refusal is not None and refusal.rule == "invalid" and refusal.index == -1
    assert f"{MAX_PATTERNS + 1} patterns" in refusal.message
    assert refusal.details() == {"reason": "POLICY_DENIED", "rule": "invalid", "policy": "agent"}
    # one pattern's problems keep naming the pattern and its position
    with pytest.raises(PatternError) as info:
        validate_patterns(["ok", "(x"], [])
    assert info.value.field == "allow[1]" and str(info.value).startswith(
        'allow[1] pattern "(x" does not compile: '
    )


# Patterns of the tests above and of docs/services/*.md, with commands they must (not) match:
# the `regex` engine (VERSION0) must answer exactly as Python `re` did.
SAME_AS_RE = [
    r"^git ",
    r"\bls\b",
    r"push\s+--force",
    r"reset --hard",
    r"rm\s+-rf",
    r"rm -rf",
    r"^(echo|rm|touch) ",
    r"(?i)^SUDO\b",
    r"curl\s+\S+\s*\|\s*(ba)?sh",
    r"[;&|]\s*rm\b",
    r"^[\w./-]+$",
    r"\$\(|`",
    r"x{2,3}y?",
    r"(?P<q>['\"]).*(?P=q)",
    r"(?<!\\)\$HOME",
    r"^(?!git ).*push",
    r"[[]",
    r"(?x) rm \s+ -rf  # a verbose one",
]
COMMANDS = [
    "git status",
    "git push --force origin",
    "git reset --hard HEAD",
    "cd src && ls -la",
    "lsof",
    "rm -rf /",
    "rm  -rf /",
    "echo hi; rm x",
    "sudo make",
    "Sudo make",
    "curl https://x.sh | bash",
    "./build.sh",
    "echo $(whoami)",
    "echo `id`",
    "xxy",
    "echo 'quoted'",
    "echo \\$HOME $HOME",
    "hg push",
    "[",
    "",
]


@pytest.mark.parametrize("pattern", SAME_AS_RE)
def test_matching_is_unchanged_from_python_re(pattern):
    validate_patterns([pattern], [pattern])
    policy = compile_policy(deny=[pattern], origin=AGENT)
    with warnings.catch_warnings():  # re's "possible nested set" notice about its own future
        warnings.simplefilter("ignore", FutureWarning)
        expected = [bool(re.search(pattern, cmd)) for cmd in COMMANDS]
    assert any(expected) and not all(expected), "each pattern matches some of the commands"
    assert [policy.check(cmd) is not None for cmd in COMMANDS] == expected


@pytest.mark.parametrize(
    "pattern,needle",
    [
        (r"[[:alpha:]]+", "POSIX class"),  # re: the characters "[:alph", regex: letters
        (r"^ls[ [:space:]]", "POSIX class"),
        (r"\\[:digit:]", "POSIX class"),
        (r"(unclosed", "missing )"),
    ],
)
def test_posix_classes_and_broken_patterns_are_refused(pattern, needle):
    with pytest.raises(PatternError) as info:
        validate_patterns([], [pattern])
    assert needle in info.value.error and info.value.field == "deny[0]"
    # escaped, the bracket is a plain character in both engines
    validate_patterns([r"\[:alpha:]", r"[\[:]"], [])


def test_a_catastrophic_pattern_fails_closed_within_the_budget():
    policy = compile_policy(deny=[r"curl", CATASTROPHIC, r"never"], origin=SERVICE)
    refusal = policy.check(CATASTROPHIC_CMD)  # returns at all: the budget stopped the search
    assert refusal is not None and not refusal.definite
    assert (refusal.rule, refusal.pattern, refusal.index, refusal.pattern_list) == (
        TIMEOUT,
        CATASTROPHIC,
        1,
        "deny",
    )
    assert f'deny pattern "{CATASTROPHIC}" took too long to evaluate' in refusal.message
    assert "simplify that pattern" in refusal.message
    assert f"{CHECK_BUDGET_SECONDS * 1000:g} ms" in refusal.message
    assert "tool service's command policy" in refusal.message
    assert refusal.details() == {
        "reason": "POLICY_DENIED",
        "rule": "timeout",
        "policy": "service",
        "pattern": CATASTROPHIC,
        "pattern_index": 1,
        "pattern_list": "deny",
    }
    # the same pattern on short text answers normally, as under re
    assert policy.check("echo aab") is None
    assert policy.check("echo aaa").rule == "deny"  # type: ignore[union-attr]
    # an earlier deny that matches decides before the slow pattern runs: a definite refusal
    early = policy.check("curl x " + CATASTROPHIC_CMD)
    assert early is not None and early.rule == "deny" and early.pattern == "curl" and early.definite


def test_a_catastrophic_allow_pattern_fails_closed_too():
    policy = compile_policy(allow=[r"^ls\b", CATASTROPHIC], origin=AGENT)
    assert policy.check("ls " + CATASTROPHIC_CMD) is None  # the first allow pattern matched
    refusal = policy.check(CATASTROPHIC_CMD)
    assert refusal is not None and refusal.rule == TIMEOUT
    assert (refusal.pattern, refusal.index, refusal.pattern_list) == (CATASTROPHIC, 1, "allow")
    assert "allow pattern" in refusal.message


def test_the_budget_is_shared_by_every_policy_of_a_check():
    slow = compile_policy(deny=[CATASTROPHIC], origin=SERVICE)
    agent = compile_policy(deny=["echo"], origin=AGENT)
    refusal = check_command(CATASTROPHIC_CMD, [slow, agent])
    assert refusal is not None and refusal.origin == SERVICE and refusal.rule == TIMEOUT
    # a deadline already spent refuses at the first pattern it could not evaluate
    spent = agent.check("ls", deadline=time.process_time() - 1)
    assert spent is not None and (spent.rule, spent.pattern, spent.index) == (TIMEOUT, "echo", 0)
    # check_exec_args (the tool service's check) answers the same
    args = check_exec_args({"cmd": CATASTROPHIC_CMD}, [slow])
    assert args is not None and args.rule == TIMEOUT and not args.definite


def test_every_refusal_but_a_timeout_is_definite():
    policy = compile_policy([r"^echo"], [r"rm"], origin=AGENT)
    for cmd in ("ls", "echo rm"):
        assert policy.check(cmd).definite  # type: ignore[union-attr]
    assert compile_policy(deny=["("], origin=AGENT).check("x").definite  # type: ignore[union-attr]
    assert check_exec_call("[]", [policy]).definite  # type: ignore[union-attr]


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
        ({"cmd": "echo a\u0000b"}, '"cmd" must not contain NUL'),
        ({"cmd": "ls", "workdir": "x\u0000"}, '"workdir" must not contain NUL'),
        ({"cmd": "ls", "session_id": "s\u0000"}, '"session_id" must not contain NUL'),
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


@pytest.mark.parametrize(
    "pattern,command",
    [(r"^\p{L}+$", "ls"), (r"(?<verb>rm)\s", "rm x"), (r"(?|(a)|(b))c", "bc")],
)
def test_regex_version0_extensions_are_accepted(pattern, command):
    """Patterns are compiled by `regex` (VERSION0): re's syntax plus its extensions."""
    validate_patterns([], [pattern])
    refusal = compile_policy(deny=[pattern], origin=AGENT).check(command)
    assert refusal is not None and refusal.rule == "deny"


def test_a_policy_may_total_at_most_max_policy_chars():
    """The patterns of one policy are bounded in total, which bounds compiling them too."""
    from agentrt.core.policy import MAX_POLICY_CHARS

    wide = "(?i)" + "[a-z\u0100-\uffff]" * 250  # slow for Python re to compile; regex: fast
    patterns = [wide + str(i) for i in range(MAX_POLICY_CHARS // len(wide) + 1)]
    with pytest.raises(PatternError) as info:
        validate_patterns([], patterns)
    assert "more than the limit" in info.value.error and info.value.field == "deny"
    broken = compile_policy(deny=patterns, origin=SERVICE)
    refusal = broken.check("ls")
    assert refusal is not None and refusal.rule == "invalid"  # fail closed
    validate_patterns([], patterns[:1])  # one such pattern is fine
