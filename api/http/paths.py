"""URL prefixes of the REST API; route modules build their paths from these, never from literals."""

from __future__ import annotations

API_V1 = "/api/v1"
