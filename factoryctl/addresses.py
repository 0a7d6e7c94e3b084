"""The address rule the workers' egress proxy applies (docs/workers.md, "Network").

The proxy lives in :mod:`factoryctl.worker`, which never imports the store; the composition (``serve`` and
``factoryctl worker``) hands it outbound notifications' address rule (:mod:`store.rules.addresspolicy`)
with loopback refused as well, so one rule decides where the server and its runs may connect.
"""

from __future__ import annotations

from store.rules.addresspolicy import connect_refusal


def egress_refusal(address: str) -> str | None:
    """Why a run's sandbox may not connect to ``address`` (private, loopback, link-local, reserved…), or
    None. Destinations listed explicitly and the worker's own model endpoint are decided before this."""
    return connect_refusal(address, allow_loopback=False)
