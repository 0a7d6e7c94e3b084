"""Per-webhook rate limits: the sliding-window policy, Retry-After, and the in-process counter."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.ratelimit.policy import Decision, MemoryCounter, consume, decide, window_position

W = 60
T0 = 1_700_000_040.0  # a window start (divisible by 60)


def test_window_position() -> None:
    assert window_position(T0) == (int(T0), 0.0)
    assert window_position(T0 + 15) == (int(T0), 0.25)
    assert window_position(T0 + 59.5, 60)[0] == int(T0)
    assert window_position(T0 + 60) == (int(T0) + 60, 0.0)
    assert window_position(125.0, 10) == (120, 0.5)


def test_under_and_exactly_at_the_limit_are_allowed() -> None:
    assert decide(60, W, 1, 0, 0.0) == Decision(True, None, 1.0)
    assert decide(60, W, 59, 0, 0.9).allowed
    assert decide(60, W, 60, 0, 0.0).allowed
    assert decide(1, W, 1, 0, 0.5).allowed


def test_over_the_limit_is_rejected_with_retry_after() -> None:
    rejected = decide(60, W, 61, 0, 0.5)
    assert not rejected.allowed
    # 30 s left in this window, then 1 s until the 60 admitted events have decayed enough for one more.
    assert rejected.retry_after == 31


def test_previous_window_is_weighted_by_its_remaining_overlap() -> None:
    # 75% of the previous window still overlaps: 60 * 0.75 = 45 count against the limit.
    assert decide(60, W, 15, 60, 0.25).allowed
    assert decide(60, W, 15, 60, 0.25).estimate == pytest.approx(60.0)
    late = decide(60, W, 16, 60, 0.25)
    assert not late.allowed and late.retry_after == 1
    assert decide(60, W, 16, 60, 0.5).allowed  # half a window later only 30 remain
    assert not decide(60, W, 1, 60, 0.0).allowed  # a full previous window blocks a fresh one


def test_retry_after_at_window_edges() -> None:
    assert decide(60, W, 61, 0, 0.0).retry_after == 61  # full window just started: all of it, plus 1 s
    assert decide(60, W, 61, 0, 59.9 / 60).retry_after == 2  # 0.1 s to the edge, then 1 s of decay
    assert decide(60, W, 61, 60, 59.9 / 60).retry_after == 2
    assert decide(10, W, 11, 0, 0.999999).retry_after == 7  # 6 s (= 60/10) of decay into the next window
    assert decide(1, W, 2, 0, 0.5).retry_after == 30 + 60  # limit 1: the next window's decay takes all of it
    assert decide(60, W, 60, 120, 0.999).retry_after == 1  # never below 1


def test_invalid_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        decide(0, W, 1, 0, 0.0)
    with pytest.raises(ValueError):
        MemoryCounter(0)


async def test_memory_counter_counts_per_key_and_window() -> None:
    counter = MemoryCounter(W)
    assert await counter.hit("a", T0) == (1, 0)
    assert await counter.hit("a", T0 + 59.9) == (2, 0)
    assert await counter.hit("b", T0 + 1) == (1, 0)
    assert await counter.hit("a", T0 + 60) == (1, 2)
    assert await counter.peek("a", T0 + 61) == (1, 2)
    assert await counter.hit("a", T0 + 180) == (1, 0)  # two windows later nothing carries over
    await counter.undo("a", T0 + 180)
    await counter.undo("a", T0 + 180)  # never below zero
    assert await counter.peek("a", T0 + 180) == (0, 0)
    assert await counter.peek("never", T0) == (0, 0)


async def test_consume_admits_exactly_the_limit_and_does_not_count_rejections() -> None:
    counter = MemoryCounter(W)
    now = T0 + 30
    decisions = [await consume(counter, "wh", 60, now) for _ in range(60)]
    assert all(d.allowed for d in decisions)
    rejected = await consume(counter, "wh", 60, now)
    assert not rejected.allowed and rejected.retry_after == 31
    for _ in range(100):  # a sender hammering without honouring Retry-After
        assert not (await consume(counter, "wh", 60, now + 10)).allowed
    assert await counter.peek("wh", now) == (60, 0)
    assert not (await consume(counter, "wh", 60, now + 30)).allowed  # 1 s too early
    assert (await consume(counter, "wh", 60, now + 31)).allowed


async def test_limits_are_independent_per_key() -> None:
    counter = MemoryCounter(W)
    for _ in range(3):
        assert (await consume(counter, "deliveries:wh_1", 3, T0)).allowed
    assert not (await consume(counter, "deliveries:wh_1", 3, T0)).allowed
    assert (await consume(counter, "deliveries:wh_2", 3, T0)).allowed


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(1, 20),
    gaps=st.lists(st.one_of(st.just(0.0), st.floats(0, 3), st.floats(0, 45)), min_size=1, max_size=60),
    start=st.floats(0, 59.99, allow_nan=False),
)
async def test_retry_after_is_exactly_the_wait_until_one_more_fits(
    limit: int, gaps: list[float], start: float
) -> None:
    counter = MemoryCounter(W)
    now = T0 + start
    for gap in gaps:  # some history, partly admitted, partly rejected
        now += gap
        await consume(counter, "k", limit, now)
    decision = await consume(counter, "k", limit, now)
    while decision.allowed:  # then fill up until rejected (at most limit more)
        decision = await consume(counter, "k", limit, now)
    retry = decision.retry_after
    assert retry is not None and retry >= 1
    if retry > 1:  # one second before Retry-After is still too early (rejections change nothing)
        assert not (await consume(counter, "k", limit, now + retry - 1)).allowed
    assert (await consume(counter, "k", limit, now + retry)).allowed


async def test_memory_counter_forgets_keys_idle_for_two_windows() -> None:
    counter = MemoryCounter(W)
    for n in range(100):  # e.g. failures from 100 client addresses
        await counter.hit(f"client-auth:198.51.100.{n}", T0)
    await counter.hit("kept", T0 + W)
    assert len(counter) == 101  # the previous window still counts
    await counter.hit("kept", T0 + 2 * W)
    assert len(counter) == 1 and await counter.peek("kept", T0 + 2 * W) == (1, 1)
