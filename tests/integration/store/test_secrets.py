"""Team secrets on real databases: versioned, encrypted at rest, never listed with values."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from store import InvalidValue, NotFound, WriteRefused
from store import secrets as secret_store
from store.models import SecretVersion
from store.teams import ensure_team


async def test_create_set_reveal_versions(sessions, box, clock) -> None:
    async with sessions() as s:
        team = await ensure_team(s)
        info = await secret_store.create(s, box, clock, team.id, "gh-secret", "v1-value")
        assert info.version == 1
        info = await secret_store.set_value(s, box, clock, team.id, "gh-secret", "v2-value")
        assert info.version == 2
        await s.commit()
    async with sessions() as s:
        assert await secret_store.reveal(s, box, team.id, "gh-secret") == ("v2-value", 2)
        assert await secret_store.reveal(s, box, team.id, "gh-secret", 1) == ("v1-value", 1)
        raw = (await s.execute(select(SecretVersion.ciphertext))).scalars().all()
        assert raw and all(b"value" not in c for c in raw)  # encrypted at rest
        listed = await secret_store.list_secrets(s, team.id)
        assert [(i.name, i.version) for i in listed] == [("gh-secret", 2)]


async def test_errors(sessions, box, clock) -> None:
    async with sessions() as s:
        team = await ensure_team(s)
        await secret_store.create(s, box, clock, team.id, "a", "x")
        with pytest.raises(WriteRefused):
            await secret_store.create(s, box, clock, team.id, "a", "y")
        with pytest.raises(InvalidValue):
            await secret_store.create(s, box, clock, team.id, "bad name!", "y")
        with pytest.raises(InvalidValue):
            await secret_store.create(s, box, clock, team.id, "empty", "")
        with pytest.raises(NotFound):
            await secret_store.set_value(s, box, clock, team.id, "missing", "v")
        await secret_store.delete_secret(s, team.id, "a")
        with pytest.raises(NotFound):
            await secret_store.reveal(s, box, team.id, "a")
