"""``factoryctl events``: a Ctrl-C while a line is printed takes effect once the line's cursor is kept, so
the resume cursor it prints is the last line shown (docs/cli.md, "events")."""

from __future__ import annotations

import os
import signal

import pytest

from factoryctl.commands.events import _ctrl_c_after


def test_ctrl_c_inside_the_block_is_raised_after_it() -> None:
    done: list[str] = []
    with pytest.raises(KeyboardInterrupt):
        with _ctrl_c_after():
            os.kill(os.getpid(), signal.SIGINT)  # delivered at once, to this (main) thread
            done.append("printed")
            done.append("cursor kept")
    assert done == ["printed", "cursor kept"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Ctrl-C works as before


def test_without_ctrl_c_the_block_just_runs() -> None:
    with _ctrl_c_after():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
