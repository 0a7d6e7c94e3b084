"""The network policy the claim hands a worker (docs/security.md, "Network policy"): the environment's
explicit mode, or by default an allowlist of its repositories' hosts plus its own patterns."""

from __future__ import annotations

from typing import Any

import pytest

from api.runs.network import network_policy, repository_destination

REPOS: list[dict[str, Any]] = [
    {"url": "https://github.com/acme/app.git"},
    {"url": "git@gitlab.example.com:acme/lib.git", "path": "lib"},
    {"url": "ssh://git@git.example.org:2222/acme/tools.git"},
    {"url": "https://GitHub.com/acme/other.git"},  # the same destination as the first
    {"url": "/srv/git/local"},
    {"url": "file:///srv/git/other"},
]


def test_no_environment_is_an_empty_allowlist() -> None:
    assert network_policy(None) == {"mode": "allowlist", "allow": []}


def test_the_default_is_the_repositories_hosts_with_their_ports() -> None:
    assert network_policy({"repos": REPOS, "setup": ["make"]}) == {
        "mode": "allowlist",
        "allow": ["github.com:443", "gitlab.example.com:22", "git.example.org:2222"],
    }
    assert network_policy({}) == {"mode": "allowlist", "allow": []}


def test_an_explicit_allowlist_adds_its_patterns_after_the_repositories() -> None:
    spec = {
        "repos": REPOS[:1],
        "network": {"mode": "allowlist", "allow": ["*.NPMJS.org:443", "github.com:443", "[::1]:8080"]},
    }
    assert network_policy(spec) == {
        "mode": "allowlist",
        "allow": ["github.com:443", "*.npmjs.org:443", "[::1]:8080"],
    }


@pytest.mark.parametrize("mode", ["none", "open"])
def test_none_and_open_carry_no_entries(mode: str) -> None:
    assert network_policy({"repos": REPOS, "network": {"mode": mode}}) == {"mode": mode, "allow": []}


def test_a_stored_pattern_that_no_longer_parses_is_left_out() -> None:
    spec = {"network": {"mode": "allowlist", "allow": ["ok.example", "https://bad.example", 7]}}
    assert network_policy(spec) == {"mode": "allowlist", "allow": ["ok.example"]}
    shapeless = {"repos": "https://x.example", "network": {"mode": "allowlist", "allow": "abc"}}
    assert network_policy(shapeless) == {"mode": "allowlist", "allow": []}  # never a letter as a host


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://user:token@github.com/acme/app.git", "github.com:443"),
        ("http://git.example:8080/a.git", "git.example:8080"),
        ("git://git.example/a.git", "git.example:9418"),
        ("git+ssh://git.example/a.git", "git.example:22"),
        ("https://[2001:db8::1]/a.git", "[2001:db8::1]:443"),
        ("github.com:acme/app.git", "github.com:22"),
        ("/srv/git/a", None),
        ("ext::sh -c x", None),
        ("https://", None),
        ("https://bad_host!/x", None),
    ],
)
def test_repository_destinations(url: str, shown: str | None) -> None:
    found = repository_destination(url)
    assert (str(found) if found else None) == shown


def test_every_policy_the_server_computes_is_one_the_worker_accepts() -> None:
    """The claim's ``network`` is read by the worker's own parser (docs/workers.md, "Network"): the server
    must never send a pattern it refuses, or the run fails instead of running under its policy."""
    from factoryctl.worker.netpolicy import NetworkPolicy

    allow = [
        "github.com",
        "*.npmjs.org:443",
        "10.0.0.7:5432",
        "[2001:db8::1]:443",
        "[::1]",
        "_acme.example.org",
    ]
    specs: list[dict[str, Any] | None] = [
        None,
        {"repos": REPOS},
        {"repos": REPOS, "network": {"mode": "allowlist", "allow": allow}},
        {"repos": [{"url": "https://[2001:db8::2]:8443/a.git"}, {"url": "git://127.0.0.1/a.git"}]},
        {"network": {"mode": "none"}},
        {"network": {"mode": "open"}},
    ]
    for spec in specs:
        policy = network_policy(spec)
        parsed = NetworkPolicy.parse(policy)
        assert (parsed.mode, list(parsed.allow)) == (policy["mode"], policy["allow"])
        assert len(parsed.patterns()) == len(policy["allow"])
