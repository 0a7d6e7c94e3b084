"""The address rule the egress proxy falls back to when the worker's entry point gives none
(factoryctl/worker/egress.py, ``public_only``): global unicast only, whatever family carries it."""

from __future__ import annotations

import pytest

from factoryctl.worker.egress import public_only


@pytest.mark.parametrize("address", ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"])
def test_public_addresses_pass(address: str) -> None:
    assert public_only(address) is None


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "::1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "100.64.0.1",
        "169.254.169.254",
        "fe80::1%eth0",
        "fd00:ec2::254",
        "0.0.0.0",
        "224.0.0.1",
        "::ffff:127.0.0.1",
        "::ffff:169.254.169.254",
        "2002:a9fe:a9fe::1",  # 6to4 carrying 169.254.169.254
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
        "64:ff9b::a00:1",  # NAT64 carrying 10.0.0.1
        "not-an-address",
    ],
)
def test_everything_else_is_refused(address: str) -> None:
    assert public_only(address) is not None
