"""The store side of each definition kind: one module per kind reads the factory's stored objects and
writes the planned changes (docs/architecture.md, "Adding a definition kind"); :mod:`.stores` lists
them and :mod:`.base` holds what they share (the apply-time writer)."""
