"""The TLS tests start servers that set the process's TLS identity (MeshServer.start); put it
back to plaintext after each, so a later test's channels are not dialed with stale files."""

from __future__ import annotations

import pytest

from agentrt.client.channels import use_process_tls
from agentrt.mesh.security import TlsConfig


@pytest.fixture(autouse=True)
def plaintext_after():
    yield
    use_process_tls(TlsConfig())
