"""The pure network policy of a sandboxed run (factoryctl/worker/netpolicy.py; docs/workers.md, "Network"):
parsing the claim's ``network``, ``host[:port]`` patterns, matching and the model endpoints."""

from __future__ import annotations

import pytest

from factoryctl.worker import InvalidClaim
from factoryctl.worker.job import Job
from factoryctl.worker.netpolicy import (
    EgressRules,
    NetworkPolicy,
    Pattern,
    model_endpoints,
    parse_pattern,
    split_host_port,
    url_endpoint,
)


def test_a_claim_without_network_is_an_empty_allowlist() -> None:
    assert Job.from_claim({"run_id": "r"}).network == NetworkPolicy("allowlist", ())
    job = Job.from_claim({"run_id": "r", "network": {"mode": "none"}})
    assert job.network == NetworkPolicy("none", ())
    job = Job.from_claim({"run_id": "r", "network": {"mode": "allowlist", "allow": ["github.com"]}})
    assert job.network.allow == ("github.com",)


@pytest.mark.parametrize(
    ("network", "message"),
    [
        ("open", "network must be an object"),
        ({"mode": "closed"}, "network.mode must be one of none, allowlist, open"),
        ({"allow": "github.com"}, "network.allow must be a list"),
        ({"allow": [7]}, "network.allow must be a list"),
        ({"allow": ["ok.com", "bad host"]}, "network.allow[1]: 'bad host' is not a host name"),
        ({"allow": ["git*.com"]}, "network.allow[0]: 'git*.com': a wildcard is allowed only as a leading"),
        ({"allow": ["a.com:0"]}, "network.allow[0]: 'a.com:0': the port must be a number from 1 to 65535"),
        ({"allow": ["a.com:x"]}, "the port must be a number"),
        ({"allow": ["[::1"]}, "unclosed ["),
        ({"allow": ["a.com"] * 1001}, "more than 1000 patterns"),
    ],
)
def test_a_malformed_network_is_an_invalid_claim(network: object, message: str) -> None:
    with pytest.raises(InvalidClaim) as raised:
        Job.from_claim({"run_id": "r", "network": network})
    assert message in str(raised.value)


def test_patterns_are_normalised() -> None:
    assert parse_pattern("GitHub.com.") == Pattern("github.com")
    assert parse_pattern("*.GitHubUserContent.com:443") == Pattern("*.githubusercontent.com", 443)
    assert parse_pattern("[::1]:8080") == Pattern("::1", 8080)
    assert parse_pattern("10.0.0.7") == Pattern("10.0.0.7")
    assert split_host_port("::1", 443) == ("::1", 443)  # a bare IPv6 address has no port
    assert split_host_port("example.com", 80) == ("example.com", 80)


def test_a_pattern_without_port_matches_https_and_http_only() -> None:
    plain = parse_pattern("github.com")
    assert plain.matches("github.com", 443) and plain.matches("github.com", 80)
    assert not plain.matches("github.com", 22) and not plain.matches("api.github.com", 443)
    assert parse_pattern("github.com:22").matches("github.com", 22)
    assert not parse_pattern("github.com:22").matches("github.com", 443)


def test_a_wildcard_matches_names_below_it_not_the_domain_itself() -> None:
    wild = parse_pattern("*.example.com")
    assert wild.matches("a.example.com", 443) and wild.matches("a.b.example.com", 443)
    assert not wild.matches("example.com", 443) and not wild.matches("badexample.com", 443)


def test_decisions_by_mode() -> None:
    model = [("127.0.0.1", 4010)]
    none = EgressRules(NetworkPolicy("none", ("github.com",)), model)
    assert none.decide("127.0.0.1", 4010).explicit
    refused = none.decide("github.com", 443)
    assert not refused.allowed and refused.reason == "network mode none: only the model endpoint is reachable"

    listed = EgressRules(NetworkPolicy("allowlist", ("github.com", "*.example.com:8443")), model)
    assert listed.decide("GitHub.com.", 443).explicit  # listed by name: private addresses too
    wild = listed.decide("x.example.com", 8443)
    assert wild.allowed and not wild.explicit  # a wildcard never reaches a private address
    assert listed.decide("127.0.0.1", 4011).reason == "not on the network allowlist"
    assert not listed.decide("x.example.com", 443).allowed
    assert not listed.decide("bad host", 443).allowed
    assert EgressRules(NetworkPolicy("open"), ()).decide("anything.com", 1).allowed


def test_only_the_worker_s_model_endpoint_may_be_private() -> None:
    run_chosen = ("127.0.0.1", 5432)
    rules = EgressRules(NetworkPolicy(), [("127.0.0.1", 4010), run_chosen], trusted=[("127.0.0.1", 4010)])
    assert rules.decide("127.0.0.1", 4010).explicit
    chosen = rules.decide("127.0.0.1", 5432)
    assert chosen.allowed and not chosen.explicit  # reached only at a public address
    listed = EgressRules(NetworkPolicy("allowlist", ("127.0.0.1:5432",)), [run_chosen], trusted=[])
    assert listed.decide("127.0.0.1", 5432).explicit  # unless the environment lists it itself
    assert EgressRules(NetworkPolicy(), [run_chosen], trusted=[("x.com", 443)]).trusted == frozenset()


def test_model_endpoints_follow_the_preset_variable_or_the_provider() -> None:
    assert model_endpoints("claude", {}) == (("api.anthropic.com", 443),)
    assert model_endpoints("claude", {"ANTHROPIC_BASE_URL": "http://127.0.0.1:4010/v1"}) == (
        ("127.0.0.1", 4010),
    )
    assert model_endpoints("codex", {}) == (("api.openai.com", 443),)
    assert model_endpoints("gemini", {"GOOGLE_GEMINI_BASE_URL": "http://[::1]:9"}) == (("::1", 9),)
    both = {"OPENAI_BASE_URL": "https://llm.internal:8443", "ANTHROPIC_BASE_URL": "http://localhost"}
    assert set(model_endpoints(None, both)) == {("llm.internal", 8443), ("localhost", 80)}
    assert model_endpoints(None, {}) == ()
    assert url_endpoint("ftp://x.com") is None and url_endpoint("http://:99") is None
