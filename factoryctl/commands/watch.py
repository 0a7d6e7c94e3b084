"""`factoryctl` commands: watch (not wired yet)."""

from __future__ import annotations

import argparse
from typing import Any


def register(sub: Any) -> None:  # argparse subparsers
    del sub
