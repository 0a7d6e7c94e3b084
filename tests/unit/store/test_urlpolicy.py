# ruff: noqa: RUF001 - the look-alike characters are the point of these tests
"""Where a notification (or an MCP URL server) may point (docs/notifications.md, "Where a notification may be
sent"): the URL as the HTTP client will connect to it, and the address a connection is about to reach."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from yarl import URL

from store.rules import urlpolicy


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        # non-ASCII hosts that IDNA/UTS-46 maps to an address (docs/notifications.md, "Where ...")
        ("https://０.０.０.０:8443/", "0.0.0.0 is the unspecified address"),
        ("https://169。254。169。254/", "169.254.169.254 is link-local"),
        ("https://①⑥⑨.②⑤④.①⑥⑨.②⑤④/", "169.254.169.254 is link-local"),
        ("https://１０.０.０.５/", "10.0.0.5 is a private or reserved address"),
        ("https://169．254．169．254/", "169.254.169.254 is link-local"),
        ("https://169｡254｡169｡254/", "169.254.169.254 is link-local"),
        ("https://８.８.８.８/", "is read as the address 8.8.8.8"),  # public, but not written as one
        ("https://①②⑦.⓪.⓪.①/", "is read as the address 127.0.0.1"),
        ("https://２８５２０３９１６６/", "is read as the address 2852039166"),
        # empty and long labels: getaddrinfo raises UnicodeError on them (item 5 of issue 23)
        ("https://a..localhost/", "empty label"),
        ("https://.example.com/", "empty label"),
        ("https://example.com../", "empty label"),
        ("https://" + "a" * 64 + ".example.com/", "longer than 63"),
        ("https://" + ".".join(["a" * 60] * 5) + "/", "longer than 253"),
        ("https://ex%41mple.com/", "cannot hold"),
        ("https://h%00/", "cannot hold"),
        ("https://exa_mple.com:0/", "port"),
        # numbers that resolvers read as addresses
        ("https://2852039166/", "not a canonical IP address"),
        ("https://0x7f.1/", "not a canonical IP address"),
        ("https://0177.0.0.1/", "not a canonical IP address"),
        ("https://127.1/", "not a canonical IP address"),
        ("https://169.254.169.254./", "169.254.169.254 is link-local"),  # a trailing dot
        ("https://8.8.8.8./", "not a canonical IP address"),
        # literal addresses, in every IPv6 form that carries an IPv4 address
        ("https://169.254.169.254/latest/meta-data/", "169.254.169.254 is link-local"),
        ("https://[::ffff:169.254.169.254]/", "169.254.169.254 is link-local"),
        ("https://[::ffff:0.0.0.0]/", "0.0.0.0 is the unspecified address"),
        ("https://[::ffff:0:a9fe:a9fe]/", "169.254.169.254 is link-local"),  # IPv4-translated
        ("https://[64:ff9b::a9fe:a9fe]/", "169.254.169.254 is link-local"),  # NAT64
        ("https://[64:ff9b::7f00:1]/", "loopback of a translator"),
        ("https://[64:ff9b:1::a9fe:a9fe]/", "169.254.169.254 is link-local"),  # local-use NAT64
        ("https://[64:ff9b:1::a00:5]/", "10.0.0.5 is a private or reserved address"),
        ("https://[64:ff9b:1:a9fe:a9:fe00::]/", "local-use NAT64"),  # /48 layout: undecidable
        ("https://[2002:a9fe:a9fe::1]/", "169.254.169.254 is link-local"),  # 6to4
        ("https://[2002:c0a8:101::]/", "192.168.1.1 is a private or reserved address"),
        ("https://[2002:7f00:1::1]/", "loopback of a translator"),
        ("https://[::a9fe:a9fe]/", "private or reserved"),  # IPv4-compatible (deprecated)
        ("https://[::7f00:1]/", "private or reserved"),
        ("https://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/", "private or reserved"),  # Teredo
        ("https://[fe80::1]/", "link-local"),
        ("https://[fe80::1%25eth0]/", "link-local"),
        ("https://[fd00::1]/", "private or reserved"),
        ("https://[fec0::1]/", "private or reserved"),  # site-local
        ("https://[ff02::1]/", "multicast"),
        ("https://[::]/", "unspecified"),
        ("https://[2001:db8::1]/", "private or reserved"),
        ("https://[3fff::1]/", "private or reserved"),
        ("https://[100::1]/", "private or reserved"),
        ("https://100.64.0.1/", "private or reserved"),
        ("https://192.0.0.8/", "private or reserved"),
        ("https://198.18.0.1/", "private or reserved"),
        ("https://224.0.0.1/", "multicast"),
        ("https://255.255.255.255/", "private or reserved"),
        ("https://0.0.0.0/", "unspecified"),
        ("https://0.1.2.3/", "private or reserved"),
        # scheme, credentials, shape
        ("http://example.com/hook", "plain http is allowed only to a loopback host"),
        ("http://[64:ff9b::7f00:1]/", "loopback of a translator"),
        ("ftp://hooks.example.com/", "must start with https://"),
        ("https://user:pw@hooks.example.com/", "user name or password"),
        ("https://:@hooks.example.com/", "user name or password"),
        ("https:///no-host", "no host"),
        ("https:hooks.example.com/", "no host"),
        ("https://exa\u00admple.com/", "cannot be parsed"),
        ("https://xn--7g7c/", "cannot be parsed"),  # punycode of a full-width zero
        ("https://xn--/", "cannot be parsed"),
        ("https://example.com\\@evil.example/", "cannot be parsed"),
        ("https://hooks.example.com:65536/", "cannot be parsed"),
        ("https://hooks.example.com/a b", "whitespace"),
    ],
)
def test_hostile_urls_are_refused_with_a_clear_reason(url: str, needle: str) -> None:
    reason = urlpolicy.url_refusal(url)
    assert reason is not None and needle in reason, (url, reason)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/factory",
        "https://HOOKS.Example.COM./factory",  # upper case and one trailing dot: a fully qualified name
        "https://xn--fa-hia.de/hook",  # punycode
        "https://faß.de/hook",  # the same name, written in Unicode
        "https://ｈｏｏｋｓ.example.com/",  # full-width letters map to a name, not an address
        "https://⑩.example.com/",
        "https://_acme.example.com/",
        "https://8.8.8.8/",
        "https://[2606:4700::1111]/",
        "https://[64:ff9b::808:808]/",  # NAT64 of a public address
        "https://[64:ff9b:1::808:808]/",
        "https://[2002:808:808::1]/",  # 6to4 of a public address
        "http://localhost:8080/hook",
        "http://LOCALHOST./hook",
        "http://ｌｏｃａｌｈｏｓｔ:8080/",
        "http://127.0.0.1:9/",
        "http://[::1]:9/",
        "http://[::ffff:127.0.0.1]:9/",  # the same host's loopback, mapped
        "https://" + "a" * 63 + ".example.com/",
    ],
)
def test_ordinary_urls_pass(url: str) -> None:
    assert urlpolicy.url_refusal(url) is None


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://０.０.０.０:8443/", "0.0.0.0"),
        ("https://169。254。169。254/", "169.254.169.254"),
        ("https://①⑥⑨.②⑤④.①⑥⑨.②⑤④/", "169.254.169.254"),
        ("https://[::ffff:127.0.0.1]/", "::ffff:7f00:1"),
    ],
)
def test_the_policy_sees_the_host_the_http_client_connects_to(url: str, host: str) -> None:
    """What aiohttp connects to is ``yarl.URL(url).raw_host``: the policy's view must be the same."""
    assert URL(url).raw_host == host


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("127.0.0.1", False),
        ("::1", False),
        ("::ffff:127.0.0.1", False),
        ("8.8.8.8", False),
        ("2606:4700::1111", False),
        ("0.0.0.0", True),
        ("::", True),
        ("169.254.169.254", True),
        ("10.1.2.3", True),
        ("::ffff:10.1.2.3", True),
        ("64:ff9b::a9fe:a9fe", True),
        ("64:ff9b:1::a9fe:a9fe", True),
        ("64:ff9b:1:a9fe:a9:fe00::", True),
        ("2002:a9fe:a9fe::1", True),
        ("fe80::1%eth0", True),
        ("not an address", True),
    ],
)
def test_an_address_about_to_be_connected_to_is_judged(address: str, refused: bool) -> None:
    assert (urlpolicy.connect_refusal(address) is not None) is refused


def test_loopback_can_be_refused_at_connect_time() -> None:
    for address in ("127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"):
        assert urlpolicy.connect_refusal(address) is None
        reason = urlpolicy.connect_refusal(address, allow_loopback=False)
        assert reason is not None and "loopback" in reason


def test_address_refusal_keeps_its_signature() -> None:
    """Callers outside notifications (MCP URL servers) use these; their answers are unchanged."""
    assert urlpolicy.address_refusal(ipaddress.ip_address("8.8.8.8")) is None
    assert urlpolicy.address_refusal(ipaddress.ip_address("127.0.0.1")) is None
    assert urlpolicy.is_loopback_host("localhost") and urlpolicy.is_loopback_host("[::1]")
    assert not urlpolicy.is_loopback_host("example.com")


PIECES = st.sampled_from([*"0aZ.-_:[]%@①０。．｡ßẞ\u00ad\u200b\\/", "xn--", "127", "::ffff:"])


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.builds(
        lambda scheme, host, port, rest: f"{scheme}://{host}{port}{rest}",
        st.sampled_from(["https", "http", "HTTPS", "ftp", ""]),
        st.lists(PIECES, max_size=12).map("".join),
        st.sampled_from(["", ":0", ":443", ":８０", ":99999", ":x"]),
        st.text(max_size=10),
    )
)
def test_any_url_is_answered_never_raises(url: str) -> None:
    """The API and the validator call this on anything a user sends: an answer, never an exception."""
    reason = urlpolicy.url_refusal(url)
    assert reason is None or isinstance(reason, str)
    if reason is None:  # what passes is what aiohttp can connect to, judged the same way
        host = URL(url).raw_host
        assert host is not None and host.isascii()
