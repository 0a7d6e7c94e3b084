"""HTTP plumbing every route module shares, so each rule has one definition and one wire behaviour.

- :mod:`api.http.paths` — the ``/api/v1`` prefix every REST route hangs off;
- :mod:`api.http.bodies` — the JSON request-body reader (size limit, optional body) and the field-error
  helpers behind every 422;
- :mod:`api.http.pagination` — opaque keyset cursors, the ``limit`` parameter and ``page_info``.

Nothing here knows a resource: feature packages (runs, factories, management...) import from here,
never from each other, for this plumbing.
"""
