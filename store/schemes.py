"""The signature schemes a webhook may name: shared by definition validation and ingress verification."""

from __future__ import annotations

from collections.abc import Mapping

SCHEMES: tuple[str, ...] = (
    "standard_webhooks",
    "stripe",
    "github",
    "sentry",
    "pagerduty",
    "vercel",
    "slack",
    "linear",
    "shopify",
)
ALIASES: Mapping[str, str] = {"standard-webhooks": "standard_webhooks", "svix": "standard_webhooks"}
