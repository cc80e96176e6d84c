"""engram up's check of its port before it starts anything: a port in use is refused, and
nothing else is taken for one."""

from __future__ import annotations

import socket

import pytest

from streams.runtime.devstack.ports import free_port, port_taken


def test_a_listening_port_is_taken_and_a_free_one_is_not() -> None:
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert port_taken("127.0.0.1", listening.getsockname()[1])
    assert not port_taken("127.0.0.1", free_port())


def test_an_ipv6_host_is_asked_in_its_own_family() -> None:
    """An IPv4 socket bound to ::1 failed, and any failure counted as 'in use'."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
            port = probe.getsockname()[1]
    except OSError:
        pytest.skip("no IPv6 loopback here")
    assert not port_taken("::1", port)


def test_an_address_this_machine_lacks_is_not_in_use() -> None:
    assert not port_taken("192.0.2.1", free_port())  # TEST-NET-1: the server says why
