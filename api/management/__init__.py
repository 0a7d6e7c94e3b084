"""Management API (docs/management.md): webhooks, their delivery logs, test filters, team secrets and
online validation of factory files for CI.

Modules: :mod:`.webhooks` (create, list, get, enable/disable, rename, rotate, supply, delete) with its
pure request rules in :mod:`.webhook_rules`, :mod:`.deliveries` (delivery log and "Test filter"),
:mod:`.replay` (re-running an Accepted delivery against today's automations),
:mod:`.notification_requests` (the request rules of notification endpoints, whose routes are
:mod:`api.notifications.routes`),
:mod:`.secrets` (``/secrets``) and :mod:`.validate` (``/factory-files/validate``, whose checks are
injected because ``api`` never imports ``reconciler``); :mod:`.routes` registers them all (it is the
entry of :data:`api.app.ROUTE_MODULES`). Body reading and field errors come from :mod:`api.http`.

Writes need the ``admin`` role, reads ``member``; worker keys get 403 and another team's resource is a
404. Request bodies are strict: unknown fields are a 422 naming them, so a typo never silently falls
back to a default such as ``auth_mode: token``.
"""
