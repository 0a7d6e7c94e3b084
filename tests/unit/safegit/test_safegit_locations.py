"""Which locations, refs and branches git may be given (docs/operations.md, "Git URLs")."""

from __future__ import annotations

import pytest

import safegit
from safegit import Policy, UnsafeLocation, check_branch, check_location, check_ref, transport_of


@pytest.mark.parametrize(
    ("location", "transport"),
    [
        ("https://git.example/org/repo.git", "https"),
        ("http://git.example/org/repo.git", "http"),
        ("ssh://git@git.example:2222/org/repo.git", "ssh"),
        ("git+ssh://git.example/org/repo.git", "ssh"),
        ("git@github.com:org/repo.git", "ssh"),
        ("git.example:org/repo.git", "ssh"),
        ("git://git.example/org/repo.git", "git"),
        ("file:///srv/git/repo.git", "file"),
        ("/srv/git/repo.git", "file"),
        ("relative/dir", "file"),
        ("./a:b", "file"),  # a '/' before the ':' is a path, as git decides
        ("ssh://[::1]/repo", "ssh"),
    ],
)
def test_allowed_locations_and_their_transport(location: str, transport: str) -> None:
    assert transport_of(location) == transport
    assert check_location(location, safegit.GIT_SOURCE) == transport


@pytest.mark.parametrize(
    ("location", "why"),
    [
        ("--upload-pack=touch /tmp/pwned", "must not start with '-'"),
        ("-oProxyCommand=x", "must not start with '-'"),
        ("ext::sh -c touch% /tmp/pwned", "remote helper syntax 'ext::'"),
        ("fd::3", "remote helper syntax 'fd::'"),
        ("EXT::sh", "remote helper syntax 'EXT::'"),
        ("my-helper+v2::https://x", "remote helper syntax 'my-helper+v2::'"),
        ("ftp://x/y", "transport 'ftp' is not allowed"),
        ("ext://x/y", "transport 'ext' is not allowed"),
        ("HTTPS://x/y", "transport 'HTTPS' is not allowed"),
        ("ssh://-oProxyCommand=touch%20x/repo", "must not start with '-'"),
        ("ssh://-user@host/repo", "must not start with '-'"),
        ("-host:repo", "must not start with '-'"),
        ("git@-host:repo", "must not start with '-'"),
        ("https:///path", "has no host"),
        ("", "must not be empty"),
        (" https://x/y", "white space"),
        ("https://x/y\n--upload-pack=x", "control characters"),
    ],
)
def test_refused_locations_say_why(location: str, why: str) -> None:
    with pytest.raises(UnsafeLocation, match=why.replace("+", r"\+").replace("*", r"\*")):
        check_location(location, safegit.ENVIRONMENT_REPOS)


def test_a_policy_limits_the_transports() -> None:
    https_only = Policy("mirror URL", frozenset({"https"}))
    assert check_location("https://x/y", https_only) == "https"
    with pytest.raises(UnsafeLocation, match=r"mirror URL '/srv/x': transport 'file' is not allowed here"):
        check_location("/srv/x", https_only)
    assert https_only.protocol_config() == ["-c", "protocol.allow=never", "-c", "protocol.https.allow=always"]


def test_messages_never_show_credentials() -> None:
    with pytest.raises(UnsafeLocation) as caught:
        check_location("ftp://user:hunter2@x/y", safegit.GIT_SOURCE)
    assert "hunter2" not in str(caught.value) and "***@x" in str(caught.value)
    assert safegit.display_url("https://u:tok@host/r.git") == "https://***@host/r.git"
    assert safegit.redact_credentials("fatal: unable to access 'https://u:tok@h/': x") == (
        "fatal: unable to access 'https://***@h/': x"
    )


@pytest.mark.parametrize("ref", ["main", "v1.2.3", "feature/x", "0123abcd"])
def test_refs_and_branches(ref: str) -> None:
    assert check_ref(ref) == ref
    assert check_branch(ref) == ref


@pytest.mark.parametrize("name", ["-x", "--orphan", "a:b", "a..b", "a b", "x.lock", "a/", ".x", "a~1", "@"])
def test_bad_branch_names_are_refused(name: str) -> None:
    with pytest.raises(UnsafeLocation):
        check_branch(name)


def test_option_like_refs_are_refused() -> None:
    with pytest.raises(UnsafeLocation, match="must not start with '-'"):
        check_ref("--detach")
