"""Commit links: only known forges, always https, rebuilt from a parsed remote (docs/reconcile.md, "Sync
status")."""

from __future__ import annotations

import pytest

from reconciler.forge import commit_url

SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    ("remote", "link"),
    [
        ("https://github.com/acme/defs.git", f"https://github.com/acme/defs/commit/{SHA}"),
        ("https://user:tok@github.com/acme/defs", f"https://github.com/acme/defs/commit/{SHA}"),
        ("https://***@GitHub.com/acme/defs/", f"https://github.com/acme/defs/commit/{SHA}"),
        ("git@github.com:acme/defs.git", f"https://github.com/acme/defs/commit/{SHA}"),
        ("ssh://git@github.com/acme/defs.git", f"https://github.com/acme/defs/commit/{SHA}"),
        ("https://gitlab.com/group/sub/defs.git", f"https://gitlab.com/group/sub/defs/-/commit/{SHA}"),
        ("git@bitbucket.org:acme/defs.git", f"https://bitbucket.org/acme/defs/commits/{SHA}"),
        ("https://codeberg.org/acme/defs", f"https://codeberg.org/acme/defs/commit/{SHA}"),
    ],
)
def test_known_forges_link_the_commit(remote: str, link: str) -> None:
    assert commit_url(remote, SHA) == link


@pytest.mark.parametrize(
    "remote",
    [
        "/srv/git/defs",  # a local path
        "file:///srv/git/defs",
        "http://github.com/acme/defs",  # not https
        "https://github.com.evil.example/acme/defs",
        "https://evil.example/github.com/acme/defs",
        "https://github.com:8443/acme/defs",
        "https://github.com/acme",  # no repository
        "https://github.com/acme/defs/extra",
        "https://github.com/acme/../defs",
        "https://github.com/acme/de%22fs",
        "https://github.com/acme/defs?x=1",
        "javascript:alert(1)//github.com/acme/defs",
        "git@github.com:/acme/defs.git",
        "",
    ],
)
def test_other_remotes_are_not_linked(remote: str) -> None:
    assert commit_url(remote, SHA) is None


def test_only_full_commit_names_are_linked() -> None:
    assert commit_url("https://github.com/acme/defs", "main") is None
    assert commit_url("https://github.com/acme/defs", SHA[:12]) is None
    assert commit_url("https://github.com/acme/defs", None) is None
