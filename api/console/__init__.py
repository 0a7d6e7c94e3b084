"""The web console (docs/console.md): the factory's dashboard actions in a browser, served by ``serve``.

- :mod:`~api.console.sessions` — server-side sessions opened with an API key (the key is never kept).
- :mod:`~api.console.security` — headers, cross-site refusal, CSRF, the signed-in user.
- :mod:`~api.console.routes` — sign-in, sign-out and the pages (Jinja2 templates, one stylesheet, one script).
"""
