"""Whose failed-authentication budget a request spends (api.auth_failures, docs/api.md, "Authentication"):
the TCP peer, or behind configured trusted proxies the right-most X-Forwarded-For hop that is not one of
them; and the ``--trusted-proxy`` / ``FACTORY_TRUSTED_PROXIES`` setting as the CLI edge reads it."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.auth_failures import Network, client_address, parse_networks
from factoryctl.cli import build_parser
from factoryctl.context import CliContext
from factoryctl.serve.options import ServeOptions

PROXIES = parse_networks(["127.0.0.1/32", "10.0.0.0/8", "2001:db8:ffff::/48"])


@pytest.mark.parametrize(
    ("peer", "forwarded", "trusted", "client"),
    [
        ("203.0.113.5", [], PROXIES, "203.0.113.5"),
        # not a trusted peer: whatever it says about itself is ignored
        ("203.0.113.5", ["198.51.100.1"], PROXIES, "203.0.113.5"),
        ("127.0.0.1", ["198.51.100.1"], (), "127.0.0.1"),
        # behind proxies: the right-most hop that is not one of them
        ("127.0.0.1", ["198.51.100.1"], PROXIES, "198.51.100.1"),
        ("127.0.0.1", ["6.6.6.6, 198.51.100.1, 10.0.0.7"], PROXIES, "198.51.100.1"),
        ("127.0.0.1", ["6.6.6.6", "198.51.100.1, 10.0.0.7"], PROXIES, "198.51.100.1"),  # two header lines
        ("10.0.0.2", ["10.0.0.9, 10.0.0.7"], PROXIES, "10.0.0.9"),  # every hop a proxy: the left-most
        ("127.0.0.1", [], PROXIES, "127.0.0.1"),  # a proxy that sent no header: the proxy
        ("127.0.0.1", ["not-an-ip, 10.0.0.7"], PROXIES, "10.0.0.7"),  # junk stops the walk at a proxy
        ("127.0.0.1", ["[2001:db8::1]:443"], PROXIES, "2001:db8::/64"),
        ("127.0.0.1", ["198.51.100.1:51234"], PROXIES, "198.51.100.1"),  # a proxy that appends the port
        # IPv6 clients per /64; IPv4-mapped addresses as IPv4
        ("2001:db8:1:2:3:4:5:6", [], (), "2001:db8:1:2::/64"),
        ("::ffff:198.51.100.3", [], (), "198.51.100.3"),
        ("2001:db8:ffff::1", ["2001:db8:1:2::9"], PROXIES, "2001:db8:1:2::/64"),
        (None, [], PROXIES, "unknown"),
    ],
)
def test_client_address(
    peer: str | None, forwarded: list[str], trusted: tuple[Network, ...], client: str
) -> None:
    assert client_address(peer, forwarded, trusted) == client


def _options(argv: list[str], env: dict[str, str], tmp_path: Path) -> ServeOptions:
    args = build_parser(["serve", *argv]).parse_args(["serve", "--workers", "0", *argv])
    ctx = CliContext(tmp_path, f"sqlite+aiosqlite:///{tmp_path / 'factory.db'}", env)
    return ServeOptions.from_args(ctx, args)


def test_trusted_proxies_come_from_the_flag_or_the_environment(tmp_path: Path) -> None:
    assert _options([], {}, tmp_path).settings.trusted_proxies == ()
    assert _options([], {}, tmp_path).settings.client_auth_failure_limit == 30
    env = {"FACTORY_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.7", "FACTORY_CLIENT_AUTH_FAILURE_LIMIT": "12"}
    settings = _options([], env, tmp_path).settings
    assert settings.trusted_proxies == ("10.0.0.0/8", "192.168.1.7/32")
    assert settings.client_auth_failure_limit == 12
    flags = ["--trusted-proxy", "172.16.0.0/12", "--trusted-proxy", "::1"]
    assert _options(flags, env, tmp_path).settings.trusted_proxies == ("172.16.0.0/12", "::1/128")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--trusted-proxy", "proxy.internal"],
            "--trusted-proxy 'proxy.internal' is not an IP address or CIDR",
        ),
        (["--client-auth-failure-limit", "0"], "--client-auth-failure-limit must be at least 1"),
    ],
)
def test_a_bad_setting_stops_the_start(argv: list[str], message: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=message):
        _options(argv, {}, tmp_path)


@pytest.mark.parametrize(
    "variable",
    ["FACTORY_RUN_LOG_MAX_LINES", "FACTORY_FOLLOWUPS_MAX_PENDING", "FACTORY_SKILLS_CACHE_MAX_ENTRIES"],
)
def test_a_setting_without_a_flag_is_named_by_its_variable(variable: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=f"^{variable} must be at least 1$"):
        _options([], {variable: "0"}, tmp_path)


def test_serve_sends_no_notification_to_loopback_unless_asked(tmp_path: Path) -> None:
    """Loopback services are the operator's: a team admin's endpoint may reach them only in development."""
    assert _options([], {}, tmp_path).notifications.allow_loopback is False
    assert _options(["--notification-allow-loopback"], {}, tmp_path).notifications.allow_loopback is True
    on = {"FACTORY_NOTIFICATION_ALLOW_LOOPBACK": "yes"}
    assert _options([], on, tmp_path).notifications.allow_loopback is True
    with pytest.raises(ValueError, match="is not a boolean"):
        _options([], {"FACTORY_NOTIFICATION_ALLOW_LOOPBACK": "maybe"}, tmp_path)
