"""Limits shared by replicas without a hot row: capacity leased from the store in chunks (docs/ingress.md,
"Limits").

On PostgreSQL the ``rate_counters`` row of a key and window counts the capacity that all replicas
together have *leased* in that window, and a lease never takes the sliding-window estimate of those
counts (:func:`~api.ratelimit.policy.decide`) above the limit: of the tokens asked for, the store
grants what :func:`grant` says fits in :func:`room`. A replica admits events from its leased tokens in
memory and leases again only when it has none left. Every admitted event was leased, so all replicas
together never admit more than the limit; tokens a replica leased but had not used when the window
ended are the only error - always under-admission - and there are at most one chunk of them per
replica and window (docs/ingress.md states the bound).

Chunks start at 1 and double with each lease of a key in a window, up to :func:`chunk_cap` (1/40 of
the limit, so a replica leaves at most 2.5% of a window unused): below a limit of 80 per window every
lease is one token, and the delivery limit (never checked, only consumed) is exact; with a limit of
millions a webhook leases about ``log2(deliveries)`` times per window.

A lease that leaves no room for one more event tells the replica until when there is none
(:func:`~api.ratelimit.policy.wait_seconds`: leased counts never go down, so nothing can fit sooner).
Until then, once its tokens are spent, the replica refuses from memory with the remaining wait as
``Retry-After`` - a flood past the limit costs no statement, and the refusal is one the store would
have given too.

The same memory answers the failed-request budget's check on every request (:attr:`LeaseRequest.keep`):
a replica holds a token of the budget in reserve - leased by the first check of a window, and again
after a failure spent it - so a credential is checked only while the budget is known not to be
spent, with no read per request; a check that finds the budget spent refuses every request until
it recovers, as a failure would.

Everything here is pure (time is a parameter): :meth:`LeaseBook.take` answers admitted, refused or
"lease this many"; the caller runs the lease (:mod:`api.ratelimit.counters`) and hands the counts it
returned to :meth:`LeaseBook.settle`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from api.ratelimit.policy import (
    DEFAULT_WINDOW_SECONDS,
    EPSILON,
    Decision,
    previous_weight,
    retry_after,
    wait_seconds,
    window_position,
)

CHUNK_DIVISOR = 40


def chunk_cap(limit: int) -> int:
    """The largest chunk a replica leases for ``limit`` per window: ``max(1, limit // 40)``."""
    return max(1, limit // CHUNK_DIVISOR)


def room(limit: int, previous: int, elapsed: float) -> int:
    """How many the current window may count in all (``previous`` counted in the previous window,
    ``elapsed`` of this one gone): the largest ``n`` with ``previous * (1 - elapsed) + n <= limit``.

    ``rate_counters`` computes exactly this in SQL (same operands, same order of float operations).
    """
    return math.floor(limit + EPSILON - previous * previous_weight(elapsed))


def grant(want: int, leased: int, room_: int) -> int:
    """Tokens a lease of ``want`` gets when ``leased`` are already out of ``room_``: never past the room."""
    return min(want, max(0, room_ - leased))


@dataclass(frozen=True)
class LeaseRequest:
    """Lease up to ``want`` tokens of ``key`` in the window starting at ``window_start``.

    ``keep`` (a check of the failed-request budget) puts every granted token into the replica's
    reserve; otherwise one of them is the event being admitted.
    """

    key: str
    limit: int
    want: int
    window_start: int
    window_seconds: int
    elapsed: float
    now_epoch: float
    keep: bool = False

    @property
    def previous_start(self) -> int:
        return self.window_start - self.window_seconds

    @property
    def remaining(self) -> float:
        """The previous window's weight, as :func:`room` uses it."""
        return previous_weight(self.elapsed)

    @property
    def limit_with_tolerance(self) -> float:
        """``limit + epsilon``, the first operand of :func:`room`'s subtraction."""
        return self.limit + EPSILON


@dataclass(frozen=True)
class Lease:
    """What the store answered: leased count of the window before and after this lease, and the previous
    window's leased count. ``after - before`` tokens were granted."""

    before: int
    after: int
    previous: int

    @property
    def granted(self) -> int:
        return self.after - self.before


@dataclass
class _Key:
    window: int  # start of the window the tokens belong to
    seen: float  # latest time asked about (a key's clock never goes back)
    tokens: int = 0  # leased and not used yet
    chunk: int = 1  # the next lease's size, before the cap
    full_until: float = 0.0  # no room for one more event in the store before this
    estimate: float = 0.0  # the leased estimate at the last lease (reported by later decisions)


class LeaseBook:
    """One replica's leased tokens and known-full windows per key; memory is bounded by the keys used in
    the last two windows (keys idle longer are dropped when a new window starts)."""

    def __init__(self, window_seconds: int = DEFAULT_WINDOW_SECONDS) -> None:
        if window_seconds < 1:
            raise ValueError("window_seconds must be at least 1")
        self._window = window_seconds
        self._keys: dict[str, _Key] = {}
        self._swept: int | None = None

    def __len__(self) -> int:
        return len(self._keys)

    def tokens(self, key: str) -> int:
        """Unused leased tokens held for ``key`` (0 when unknown)."""
        state = self._keys.get(key)
        return 0 if state is None else state.tokens

    def take(self, key: str, limit: int, now_epoch: float, *, keep: bool = False) -> Decision | LeaseRequest:
        """Admit from a local token, refuse from a known-full window, or ask for a lease.

        With ``keep`` (a check) nothing is taken: a held token answers "allowed", and a lease fills the
        reserve. Requests racing a window roll-over are counted in the newer window.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._sweep(now_epoch)
        state = self._keys.get(key)
        if state is not None:
            now_epoch = max(now_epoch, state.seen)
        start, elapsed = window_position(now_epoch, self._window)
        if state is None:
            state = self._keys[key] = _Key(window=start, seen=now_epoch)
        state.seen = now_epoch
        if state.window != start:  # tokens of an old window are void: they were counted there
            state.window, state.tokens, state.chunk = start, 0, 1
        if state.tokens > 0:
            if not keep:
                state.tokens -= 1
            return Decision(True, None, state.estimate)
        if now_epoch + EPSILON < state.full_until:  # as Retry-After rounds: ceil(wait - epsilon)
            return Decision(False, retry_after(state.full_until - now_epoch), state.estimate)
        want = min(state.chunk, chunk_cap(limit))
        return LeaseRequest(key, limit, want, start, self._window, elapsed, now_epoch, keep)

    def settle(self, request: LeaseRequest, lease: Lease) -> Decision:
        """Take in what a lease got: admit (or keep) on a grant, refuse and remember on none."""
        if not 0 <= lease.granted <= request.want:
            raise ValueError(f"a lease of {request.want} cannot grant {lease.granted}")
        state = self._keys.get(request.key)
        if state is None:
            state = self._keys[request.key] = _Key(window=request.window_start, seen=request.now_epoch)
        current = state.window == request.window_start
        estimate = lease.previous * request.remaining + lease.after
        wait = wait_seconds(request.limit, self._window, lease.after + 1, lease.previous, request.elapsed)
        if wait > 0:
            state.full_until = max(state.full_until, request.now_epoch + wait)
        if current:
            state.chunk = min(state.chunk * 2, chunk_cap(request.limit))
            state.estimate = estimate
        if lease.granted == 0:
            return Decision(False, retry_after(wait), estimate + 1)
        if current:  # a lease that raced a roll-over admits its own event; the rest are void
            state.tokens += lease.granted if request.keep else lease.granted - 1
        return Decision(True, None, estimate)

    def _sweep(self, now_epoch: float) -> None:
        """Once per window: forget keys idle for two windows. Their tokens are void, and their refusals have
        expired: :func:`~api.ratelimit.policy.wait_seconds` is always shorter than two windows."""
        start, _ = window_position(now_epoch, self._window)
        if start == self._swept:
            return
        self._swept = start
        horizon = now_epoch - 2 * self._window
        for key in [key for key, state in self._keys.items() if state.seen < horizon]:
            del self._keys[key]
