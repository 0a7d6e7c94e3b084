"""Leased limits (api.ratelimit.leases): the grant clamp, chunk growth and cap, known-full windows and their
expiry, the failed-request budget's reserve, window roll-over and memory - with a manual clock and a
store simulated in memory by the same clamp the ``rate_counters`` statement applies (that the statement
agrees with it is tests/integration/api/ingress/test_ratelimit.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from api.ratelimit.leases import Lease, LeaseBook, LeaseRequest, chunk_cap, grant, room
from api.ratelimit.policy import Decision, decide, window_position

W = 60
T0 = 1_700_000_040.0  # a window start (divisible by 60)


class Store:
    """``rate_counters`` in memory: leased counts per (key, window), leases clamped by room()/grant()."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int], int] = {}
        self.statements = 0

    def lease(self, request: LeaseRequest) -> Lease:
        self.statements += 1
        previous = self.rows.get((request.key, request.previous_start), 0)
        before = self.rows.get((request.key, request.window_start), 0)
        got = grant(request.want, before, room(request.limit, previous, request.elapsed))
        self.rows[(request.key, request.window_start)] = before + got
        return Lease(before, before + got, previous)


class Replica:
    """One process's LeaseBook over the shared Store: what LeasedCounter does, without SQL."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.book = LeaseBook(W)
        self.wants: list[int] = []

    def _take(self, key: str, limit: int, now: float, keep: bool) -> Decision:
        step = self.book.take(key, limit, now, keep=keep)
        if isinstance(step, Decision):
            return step
        self.wants.append(step.want)
        return self.book.settle(step, self.store.lease(step))

    def consume(self, key: str, limit: int, now: float) -> Decision:
        return self._take(key, limit, now, keep=False)

    def check(self, key: str, limit: int, now: float) -> Decision:
        return self._take(key, limit, now, keep=True)


def test_chunk_cap_is_a_fortieth_of_the_limit_and_at_least_one() -> None:
    assert [chunk_cap(n) for n in (1, 30, 60, 79, 80, 400, 10**9)] == [1, 1, 1, 1, 2, 10, 25_000_000]


def test_room_is_what_decide_admits() -> None:
    assert room(60, 0, 0.5) == 60
    assert room(60, 60, 0.25) == 15  # 45 of the previous window still overlap
    assert room(60, 60, 0.0) == 0
    assert room(10, 100, 0.0) == -90  # a grant is never negative though
    for limit, previous, elapsed in [(60, 60, 0.25), (7, 5, 0.3), (1, 1, 0.999), (100, 37, 0.61)]:
        n = room(limit, previous, elapsed)
        assert decide(limit, W, n, previous, elapsed).allowed
        assert not decide(limit, W, n + 1, previous, elapsed).allowed


def test_grant_is_clamped_to_the_room() -> None:
    assert grant(8, 0, 60) == 8
    assert grant(8, 55, 60) == 5
    assert grant(8, 60, 60) == 0
    assert grant(8, 70, 60) == 0  # a room that shrank below what is out (a clock behind) grants nothing
    assert grant(1, 0, -5) == 0


def test_chunks_double_per_lease_up_to_the_cap_and_restart_each_window() -> None:
    replica = Replica(Store())
    for _ in range(60):
        assert replica.consume("k", 400, T0 + 1).allowed
    assert replica.wants == [1, 2, 4, 8, 10, 10, 10, 10, 10]  # 65 leased, 60 used
    assert replica.book.tokens("k") == 5
    assert replica.consume("k", 400, T0 + W).allowed  # next window: old tokens are void, chunk 1 again
    assert replica.wants[-1] == 1 and replica.book.tokens("k") == 0
    assert replica.store.rows[("k", int(T0))] == 65  # counted where they were leased, never given back


def test_below_80_per_window_every_lease_is_one_event_and_the_limit_is_exact() -> None:
    store = Store()
    one, two = Replica(store), Replica(store)
    decisions = [(one if n % 3 else two).consume("k", 60, T0 + n / 10) for n in range(100)]
    assert [d.allowed for d in decisions] == [True] * 60 + [False] * 40
    assert set(one.wants + two.wants) == {1}
    assert store.rows[("k", int(T0))] == 60


def test_a_full_window_is_refused_from_memory_until_capacity_can_reappear() -> None:
    store = Store()
    replica = Replica(store)
    now = T0 + 30
    for _ in range(4):
        assert replica.consume("k", 4, now).allowed
    assert store.statements == 4  # the fourth lease filled the window: known at once, no fifth lease
    refused = replica.consume("k", 4, now)
    assert refused == Decision(False, decide(4, W, 5, 0, 0.5).retry_after, 4.0)
    assert refused.retry_after == 45  # 30 s to the window's end, then 15 s until 4 * (1 - e) + 1 <= 4
    for step in range(44):  # a flood that ignores Retry-After, which counts down
        later = replica.consume("k", 4, now + step)
        assert not later.allowed and later.retry_after == 45 - step
    assert store.statements == 4
    assert replica.consume("k", 4, now + 45).allowed  # exactly when the store has room again
    assert store.statements == 5


def test_a_replica_learns_a_full_window_from_its_first_refused_lease() -> None:
    store = Store()
    one, two = Replica(store), Replica(store)
    for _ in range(3):
        assert one.consume("k", 3, T0).allowed
    refused = two.consume("k", 3, T0 + 6)
    assert not refused.allowed and refused.retry_after == decide(3, W, 4, 0, 0.1).retry_after
    assert not two.consume("k", 3, T0 + 7).allowed
    assert store.statements == 4  # one refused lease, then memory


def test_refusals_are_exact_wait_not_whole_seconds_early() -> None:
    store = Store()
    replica = Replica(store)
    for _ in range(10):  # fills the window at 0.5 s: capacity reappears 6 s into the next one
        assert replica.consume("k", 10, T0 + 0.5).allowed
    refused = replica.consume("k", 10, T0 + 0.5)
    assert refused.retry_after == 66  # 65.5 s, rounded up
    assert not replica.consume("k", 10, T0 + W + 5.9).allowed
    assert replica.consume("k", 10, T0 + W + 6).allowed  # not held back until the rounded-up 66.5 s


def test_a_check_keeps_its_token_in_reserve_for_the_next_failure() -> None:
    store = Store()
    replica = Replica(store)
    for _ in range(5):  # authenticated requests: one lease per window, then memory
        assert replica.check("auth", 3, T0).allowed
    assert store.statements == 1 and replica.book.tokens("auth") == 1
    assert replica.consume("auth", 3, T0).allowed  # a failure spends the reserve
    assert store.statements == 1
    assert replica.check("auth", 3, T0).allowed and replica.consume("auth", 3, T0).allowed
    assert replica.check("auth", 3, T0).allowed  # the third token: the budget is now fully leased
    assert replica.consume("auth", 3, T0).allowed
    assert store.statements == 3
    spent = replica.check("auth", 3, T0 + 1)  # known full: refused before any credential is checked
    assert not spent.allowed and spent.retry_after == decide(3, W, 4, 0, 1 / 60).retry_after
    assert store.statements == 3


def test_settle_refuses_an_impossible_grant() -> None:
    book = LeaseBook(W)
    step = book.take("k", 10, T0)
    assert isinstance(step, LeaseRequest) and step.want == 1
    with pytest.raises(ValueError):
        book.settle(step, Lease(0, 2, 0))
    with pytest.raises(ValueError):
        book.take("k", 0, T0)
    with pytest.raises(ValueError):
        LeaseBook(0)


def test_a_lease_racing_a_roll_over_admits_its_event_and_voids_the_rest() -> None:
    book = LeaseBook(W)
    wants: list[int] = []
    while len(wants) < 3 or book.tokens("k"):  # leases of 1, 2 and 4, all used: the chunk is 8 now
        step = book.take("k", 400, T0 + 50)
        if isinstance(step, LeaseRequest):
            wants.append(step.want)
            book.settle(step, Lease(sum(wants) - step.want, sum(wants), 0))
    assert wants == [1, 2, 4]
    step = book.take("k", 400, T0 + 59)
    assert isinstance(step, LeaseRequest) and step.want == 8
    assert isinstance(book.take("k", 400, T0 + W + 1), LeaseRequest)  # another request rolls the window
    assert book.settle(step, Lease(15, 23, 0)).allowed
    assert book.tokens("k") == 0
    late = book.take("k", 400, T0 + 58)  # an earlier time than the key has seen counts as the latest
    assert isinstance(late, LeaseRequest) and late.window_start == int(T0) + W


def test_keys_idle_for_two_windows_are_forgotten() -> None:
    replica = Replica(Store())
    for n in range(100):
        replica.consume(f"k{n}", 400, T0 + 30)
    replica.consume("busy", 400, T0 + W)
    assert len(replica.book) == 101
    replica.consume("busy", 400, T0 + 2 * W)  # idle for 90 s only
    assert len(replica.book) == 101
    replica.consume("busy", 400, T0 + 3 * W)
    assert len(replica.book) == 1


@settings(max_examples=150, deadline=None)
@given(
    limit=st.sampled_from([1, 3, 10, 60, 80, 200, 400, 1000]),
    replicas=st.integers(1, 3),
    events=st.lists(
        st.tuples(st.integers(0, 2), st.floats(0, 4), st.integers(1, 40)), min_size=1, max_size=80
    ),
)
def test_replicas_never_admit_more_than_the_limit_and_refuse_only_within_the_bound(
    limit: int, replicas: int, events: list[tuple[int, float, int]]
) -> None:
    """The documented bound (docs/ingress.md, "Limits"): the sliding-window estimate over admitted events
    never exceeds the limit, and a refusal happens only when it is above
    ``limit - 1 - (R - 1) * (c - 1) - R * (c - 1) * (1 - elapsed)``."""
    store = Store()
    group = [Replica(store) for _ in range(replicas)]
    admitted: dict[int, int] = {}
    slack = chunk_cap(limit) - 1
    now = T0
    for who, gap, burst in events:
        now += gap
        start, elapsed = window_position(now, W)
        for _ in range(burst):
            decision = group[who % replicas].consume("k", limit, now)
            estimate = admitted.get(start - W, 0) * (1 - elapsed) + admitted.get(start, 0)
            if decision.allowed:
                admitted[start] = admitted.get(start, 0) + 1
                assert estimate + 1 <= limit + 1e-9
            else:
                assert estimate > limit - 1 - (replicas - 1) * slack - replicas * slack * (1 - elapsed) - 1e-9


@settings(max_examples=150, deadline=None)
@given(
    limit=st.integers(1, 120),
    gaps=st.lists(st.one_of(st.just(0.0), st.floats(0, 3), st.floats(0, 45)), min_size=1, max_size=60),
    start=st.floats(0, 59.99, allow_nan=False),
)
def test_retry_after_is_exactly_the_wait_until_the_replica_admits_again(
    limit: int, gaps: list[float], start: float
) -> None:
    replica = Replica(Store())
    now = T0 + start
    for gap in gaps:
        now += gap
        replica.consume("k", limit, now)
    decision = replica.consume("k", limit, now)
    while decision.allowed:
        decision = replica.consume("k", limit, now)
    retry = decision.retry_after
    assert retry is not None and retry >= 1
    statements = replica.store.statements
    if retry > 1:  # one second early is refused from memory
        early = replica.consume("k", limit, now + retry - 1)
        assert not early.allowed and early.retry_after == 1
        assert replica.store.statements == statements
    assert replica.consume("k", limit, now + retry).allowed


def test_the_bound_is_reached_when_another_replica_sits_on_a_full_chunk() -> None:
    """limit 1000, chunk cap 25: a replica that leased 25 and used one holds 24 the others cannot use."""
    store = Store()
    idle, busy = Replica(store), Replica(store)
    for _ in range(32):  # leases of 1, 2, 4, 8, 16 cover 31 events; the 32nd leases 25
        assert idle.consume("k", 1000, T0).allowed
    assert idle.wants == [1, 2, 4, 8, 16, 25] and idle.book.tokens("k") == 24
    admitted = 32
    while busy.consume("k", 1000, T0 + 1).allowed:
        admitted += 1
    assert admitted == 1000 - (2 - 1) * (25 - 1)  # limit - (R - 1) * (c - 1), and no fewer
    assert store.rows[("k", int(T0))] == 1000
    # Half a window later the void tokens still weigh, with the previous window: 976 * 0.5 + 500.
    later = 0
    while busy.consume("k", 1000, T0 + W + 30).allowed:
        later += 1
    assert later == 500 and admitted * 0.5 + later > 1000 - 1 - 24 - 2 * 24 * 0.5
