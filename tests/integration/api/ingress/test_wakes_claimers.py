"""Ingress wakes this process's claimers when an accepted delivery queued runs (and only then), so a
webhook-started run reaches a waiting worker at once instead of at its next poll."""

from __future__ import annotations

from api.runs.claim_signal import claim_signal


async def test_an_accepted_delivery_that_starts_runs_wakes_claimers(ingress) -> None:
    hook = await ingress.webhook()
    await ingress.automation("triage", [hook], payload_filter={"action": ["opened"]})
    woken = claim_signal(ingress.client.app).current()  # what a waiting claimer holds

    resp = await ingress.post(hook, {"action": "opened"})

    assert resp.status == 202
    assert len(await ingress.runs(hook)) == 1
    assert woken.is_set()


async def test_deliveries_that_queue_nothing_do_not_wake_claimers(ingress) -> None:
    hook = await ingress.webhook()
    await ingress.automation("triage", [hook], payload_filter={"action": ["opened"]})
    woken = claim_signal(ingress.client.app).current()

    no_match = await ingress.post(hook, {"action": "closed"}, headers={"X-Factory-Delivery-Id": "d-1"})
    await ingress.post(hook, {"action": "opened"}, headers={"X-Factory-Delivery-Id": "d-2"})
    woken_by_first_run = woken.is_set()
    woken = claim_signal(ingress.client.app).current()
    duplicate = await ingress.post(hook, {"action": "opened"}, headers={"X-Factory-Delivery-Id": "d-2"})

    assert no_match.status == 202 and duplicate.status == 202
    assert woken_by_first_run
    assert not woken.is_set()  # a duplicate starts nothing, so nobody is woken for it
    assert len(await ingress.runs(hook)) == 1
