"""Whom a model call is charged to: the body's tenant against the caller's x-agentrt-tenant."""

from __future__ import annotations

import pytest

from agentrt.core.errors import MeshError, Reason
from agentrt.gateway.validation import resolve_tenant, validate_request
from agentrt.mesh.context import valid_tenant
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g

MALFORMED = ["x" * 5000, "x" * 65, "a\nb", "acme\n", " acme", "-acme", "ac me", "ten/ant", "é"]


@pytest.mark.parametrize(
    ("body", "caller", "charged"),
    [
        ("", "default", "default"),  # neither: the default tenant
        ("", "acme", "acme"),  # the header alone
        ("acme", "acme", "acme"),  # both, agreeing (how runs sends it)
        ("globex", "default", "globex"),  # no header: the body names the tenant
        ("x" * 64, "default", "x" * 64),
    ],
)
def test_the_charged_tenant(body, caller, charged):
    assert resolve_tenant(body, caller) == charged


@pytest.mark.parametrize("body", MALFORMED)
@pytest.mark.parametrize("caller", ["default", "acme"])
def test_a_malformed_body_tenant_is_refused_by_the_headers_rule(body, caller):
    assert not valid_tenant(body)  # the interceptor would refuse it as a header too
    with pytest.raises(MeshError) as info:
        resolve_tenant(body, caller)
    assert (info.value.status, info.value.reason) == ("INVALID_ARGUMENT", Reason.INVALID_ID)
    assert info.value.metadata == {"field": "request.tenant"}
    assert body not in info.value.message  # never echoed (it may be 16 MiB)


@pytest.mark.parametrize("body", ["globex", "default"])
def test_a_body_tenant_contradicting_the_header_is_refused(body):
    with pytest.raises(MeshError) as info:
        resolve_tenant(body, "acme")
    assert (info.value.status, info.value.reason) == ("INVALID_ARGUMENT", Reason.INVALID_VALUE)
    assert info.value.metadata == {"field": "request.tenant"}


def test_validate_request_refuses_a_malformed_tenant_from_direct_callers():
    request = g.ModelRequest(
        messages=[c.Message(role=c.ROLE_USER, content=[c.ContentBlock(text=c.TextBlock(text="hi"))])],
        tenant="a\nb",
    )
    with pytest.raises(MeshError) as info:
        validate_request(request)
    assert info.value.reason == Reason.INVALID_ID
    request.tenant = "acme"
    validate_request(request)
