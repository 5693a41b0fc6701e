"""`agentrt up` gives every service a metrics port: the environment's, else a free one."""

from __future__ import annotations

import argparse

import pytest

from agentrt.cli.args import metrics_port
from agentrt.cli.ports import metrics_ports
from agentrt.cli.serve import SERVICES, with_metrics_port
from agentrt.gateway.config import GatewayConfig
from agentrt.sessions.config import SessionsConfig


def test_every_service_gets_a_distinct_free_port_that_avoids_the_grpc_ports():
    grpc_ports = [50051, 50052]
    ports = metrics_ports({}, avoid=grpc_ports)
    assert list(ports) == list(SERVICES)
    assert len(set(ports.values())) == len(SERVICES)
    assert all(p > 0 and p not in grpc_ports for p in ports.values())


def test_a_port_named_in_the_environment_is_kept_and_zero_turns_it_off():
    ports = metrics_ports({"AGENTRT_GATEWAY_METRICS_PORT": "9464", "AGENTRT_TASKS_METRICS_PORT": "0"})
    assert ports["gateway"] == 9464 and ports["tasks"] == 0 and ports["runs"] > 0


@pytest.mark.parametrize("value", ["-1", "http", "70000"])
def test_a_malformed_port_in_the_environment_is_refused(value):
    with pytest.raises(ValueError, match=f"AGENTRT_RUNS_METRICS_PORT={value!r}"):
        metrics_ports({"AGENTRT_RUNS_METRICS_PORT": value})


def test_the_flag_type_accepts_0_to_65535():
    assert metrics_port("0") == 0 and metrics_port("65535") == 65535
    for bad in ("-1", "65536", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            metrics_port(bad)


def test_the_flag_lands_in_the_gateways_own_setting_and_in_the_server_config_elsewhere():
    gateway = with_metrics_port(GatewayConfig(), 9464)
    assert gateway.server.metrics_port == 9464
    sessions = with_metrics_port(SessionsConfig(), 9465)
    assert sessions.server.metrics_port == 9465
    assert with_metrics_port(sessions, None) is sessions
