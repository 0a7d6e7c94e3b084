"""The store: typed models, sessions, migrations and the store functions both services share.

Exception tree::

    StoreError
    ├── NotFound          a row does not exist (or belongs to another team)
    ├── WriteRefused      a uniqueness or state rule refused the write
    ├── InvalidValue      a value the store refuses (e.g. a secret name or value)
    └── SecretKeyError    the encryption key is missing, malformed, or cannot decrypt a value

Callers own the session: every store function takes an ``AsyncSession`` and never commits
unless its name says so; the caller decides the transaction boundary.
"""

from __future__ import annotations

from store.errors import InvalidValue, NotFound, SecretKeyError, StoreError, WriteRefused

__all__ = ["InvalidValue", "NotFound", "SecretKeyError", "StoreError", "WriteRefused"]
