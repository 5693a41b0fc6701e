"""`agentrt health`'s exit statuses against a real grpc.health server (cli/health.py).

0 SERVING; 1 an answer that is not SERVING (NOT_FOUND for a service the server does not know
included); 4 no answer within --timeout; 2 bad flags. Found by a break-it session: a timeout of
inf, nan or -1 was handed to grpc as is and failed a SERVING service at once (exit 4: a
container HEALTHCHECK would mark a healthy container unhealthy); an address that cannot be one
was reported as UNAVAILABLE like a service that is down; NOT_FOUND exited 4, "no answer".
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from agentrt.cli.main import main


@pytest.fixture
def serving() -> Iterator[str]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    servicer = health.HealthServicer()
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


def test_the_fixture_serves(serving):
    assert main(["health", serving]) == 0


@pytest.mark.parametrize("timeout", ["inf", "1e308", "3601"])
def test_an_unbounded_timeout_is_a_usage_error_not_a_failed_check(serving, timeout):
    assert main(["health", serving, "--timeout", timeout]) == 2


@pytest.mark.parametrize("timeout", ["-1", "nan"])
def test_a_timeout_that_is_no_duration_is_a_usage_error(serving, timeout):
    assert main(["health", serving, "--timeout", timeout]) == 2


@pytest.mark.parametrize(
    "address", ["127.0.0.1:abc", "127.0.0.1:0", "127.0.0.1:65536", "http://127.0.0.1:50051"]
)
def test_an_address_that_is_no_address_is_a_usage_error(address):
    assert main(["health", address, "--timeout", "0.5"]) == 2


@pytest.mark.parametrize("address", ["[::1]:50051", "localhost:8081", "unix:/run/agentrt.sock"])
def test_addresses_that_are_addresses_pass_the_check(address):
    from agentrt.cli.health import _address_problem

    assert _address_problem(address) == ""


def test_an_unknown_service_name_is_an_answer_not_unreachable(serving):
    assert main(["health", serving, "--service", "agentrt.v1.Nope"]) == 1
