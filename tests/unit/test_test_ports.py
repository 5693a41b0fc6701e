"""tests/ports.py: the suite's ports come from below the ephemeral range, one slice per worker."""

from __future__ import annotations

import itertools
import socket

import pytest

from agentrt.cli.ports import port_taken
from tests import ports


def test_the_workers_slices_are_disjoint_and_below_the_ephemeral_range(monkeypatch):
    monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    slices = []
    for worker in ("gw0", "gw1"):
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker)
        slices.append(set(ports._slice()))
    assert slices[0] and slices[1] and not slices[0] & slices[1]
    low, high = (int(x) for x in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    assert max(slices[0] | slices[1]) < low


def test_ports_given_out_are_distinct_free_and_not_given_again_soon():
    first = ports.free_ports(5)
    again = ports.free_ports(5)
    assert len(set(first + again)) == 10
    assert not any(port_taken("127.0.0.1", p) for p in first + again)
    base = ports.free_base_port(5)
    assert not any(port_taken("127.0.0.1", base + i) for i in range(5))


def test_a_port_something_listens_on_is_never_given_out(monkeypatch):
    with socket.socket() as held:
        held.bind(("127.0.0.1", ports.free_port()))
        held.listen()
        taken = held.getsockname()[1]
        share = ports._slice()
        # the next candidate is the held port itself
        order = [p for p in share if p >= taken] + [p for p in share if p < taken]
        monkeypatch.setattr(ports, "_cycle", itertools.cycle(order))
        (given,) = ports.free_ports(1)
        assert given != taken and given in share


@pytest.mark.parametrize("count", [1, 3])
def test_free_ports_returns_the_count_asked_for(count):
    assert len(ports.free_ports(count)) == count
