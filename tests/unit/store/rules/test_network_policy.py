"""Host patterns of an environment's network policy (docs/definitions.md, "Network policy"): what parses,
to what, and the words a writer gets for what does not."""

from __future__ import annotations

import pytest

from store.rules.network_policy import BadPattern, HostPattern, network_problems, parse_pattern


@pytest.mark.parametrize(
    ("text", "host", "port", "shown"),
    [
        ("github.com", "github.com", None, "github.com"),
        ("GitHub.COM:443", "github.com", 443, "github.com:443"),
        ("*.githubusercontent.com:443", "*.githubusercontent.com", 443, "*.githubusercontent.com:443"),
        ("*.example.com", "*.example.com", None, "*.example.com"),
        ("localhost:8080", "localhost", 8080, "localhost:8080"),
        ("10.0.0.7:5432", "10.0.0.7", 5432, "10.0.0.7:5432"),
        ("[2001:DB8::1]:443", "2001:db8::1", 443, "[2001:db8::1]:443"),
        ("[::1]", "::1", None, "[::1]"),
        ("_acme.example.org", "_acme.example.org", None, "_acme.example.org"),
    ],
)
def test_patterns_parse_to_a_lower_case_host_and_an_optional_port(
    text: str, host: str, port: int | None, shown: str
) -> None:
    pattern = parse_pattern(text)
    assert pattern == HostPattern(host, port)
    assert str(pattern) == shown
    assert pattern.wildcard == host.startswith("*.")


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("", "must not be empty"),
        (" github.com", "white space"),
        ("https://github.com", "write a host, not a URL"),
        ("github.com/org", "no user, path or query"),
        ("git@github.com", "no user, path or query"),
        ("10.0.0.0/8", "CIDR ranges are not supported"),
        ("github.com:0", "from 1 to 65535"),
        ("github.com:65536", "from 1 to 65535"),
        ("github.com:https", "from 1 to 65535"),
        ("github.com:", "from 1 to 65535"),
        ("2001:db8::1", "IPv6 address in brackets"),
        ("[not-v6]:443", "is not an IPv6 address"),
        ("*", "use mode: open"),
        ("*.com", "too broad"),
        ("api.*.example.com", "only as the whole first label"),
        ("*.10.0.0.1", "needs a host name"),
        ("300.1.1.1", "is not an IPv4 address"),
        ("-bad.example.com", "is not a host name"),
        ("a..b", "is not a host name"),
        ("bücher.de", "ASCII form"),
        ("x" * 64 + ".com", "is not a host name"),
    ],
)
def test_malformed_patterns_say_why(text: str, why: str) -> None:
    with pytest.raises(BadPattern) as caught:
        parse_pattern(text)
    assert why in str(caught.value)


def test_problems_point_at_the_entry_and_allow_needs_the_allowlist_mode() -> None:
    good = {"mode": "allowlist", "allow": ["github.com", "*.npmjs.org:443"]}
    assert network_problems(good) == []
    assert network_problems({"mode": "none"}) == []
    assert network_problems({"mode": "open", "allow": []}) == []
    [(where, why)] = network_problems({"mode": "allowlist", "allow": ["ok.example", "https://x.example"]})
    assert where == ("allow", 1) and why.startswith("host pattern 'https://x.example': write a host")
    for mode in ("none", "open"):
        [(where, why)] = network_problems({"mode": mode, "allow": ["github.com"]})
        assert where == ("allow",) and f"only with mode: allowlist (this environment's mode is {mode})" in why
    assert network_problems(None) == [] and network_problems({"mode": "allowlist", "allow": "x"}) == []
