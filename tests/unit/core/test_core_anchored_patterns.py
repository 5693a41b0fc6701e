"""Every pattern that checks a caller's id or name refuses a trailing newline.

A regular expression's `$` also matches just before a final "\n", so `re.match(r"^x$", "x\n")`
succeeds: `valid_id("sbx_1\n")` was True, and such an id reached the journals and the sandbox
lookups. The patterns end with `\\Z`; each is checked here with a value it accepts, then the
same value with a newline after it.
"""

from __future__ import annotations

import re

import pytest

from agentrt.core.ids import valid_id
from agentrt.gateway import validation as gateway_validation
from agentrt.mesh.context import valid_tenant
from agentrt.runs.spec import fields, validation
from agentrt.sessions import domain as sessions_domain
from agentrt.sessions import servicer as sessions_servicer
from agentrt.tasks import manager as tasks_manager
from agentrt.tools.sandbox import manager as sandbox_manager

CASES = [
    (gateway_validation._TOOL_NAME, "read_file"),
    (fields.AGENT_NAME, "triage.agent"),
    (fields.TOOL_NAME, "read_file"),
    (validation.ENV_NAME, "HOME"),
    (validation.DOCKER_FIELDS["image"], "python:3.11"),
    (validation.DOCKER_FIELDS["user"], "1000:1000"),
    (validation.DOCKER_FIELDS["network"], "bridge"),
    (sessions_domain._KIND_RE, "note"),
    (sessions_servicer._TOOL_NAME_RE, "read_file"),
    (tasks_manager._KIND_RE, "report"),
    (tasks_manager._AGENT_RE, "worker"),
    (tasks_manager._TOKEN_RE, "12.task_1"),
    (sandbox_manager._ENV_NAME, "HOME"),
    (sandbox_manager._DOCKER_FIELDS["image"], "python:3.11"),
    (sandbox_manager._DOCKER_FIELDS["user"], "1000:1000"),
    (sandbox_manager._DOCKER_FIELDS["network"], "bridge"),
]


@pytest.mark.parametrize(("pattern", "value"), CASES)
def test_a_pattern_accepts_its_value_and_not_the_value_with_a_newline_after_it(pattern, value):
    assert isinstance(pattern, re.Pattern)
    assert pattern.match(value)
    assert pattern.match(value + "\n") is None


@pytest.mark.parametrize("check", [valid_id, valid_tenant])
def test_ids_and_tenants_refuse_a_trailing_newline(check):
    assert check("run_1")
    assert not check("run_1\n") and not check("run_1\r\n") and not check("\nrun_1")
