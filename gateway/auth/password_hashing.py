"""Stretched password hashes (PLAIN logins), run fairly between client hosts.

Theory of operation
-------------------
A PLAIN password is kept as a PBKDF2 hash (100,000 iterations: ~20 ms of CPU).
Verifying it is the one thing a client can make kgw do that costs milliseconds,
before it has proved anything, so:

* a password this process verified recently for the same stored credential is
  recognised by a keyed digest (:class:`~authz.credentials.VerifiedPasswords`) and
  costs microseconds, on the loop, never a thread: a client that reconnects with
  the right password (Kafka's command-line tools connect once per command) does not
  pay the hash again, nor wait behind anyone's;
* every other verification runs on at most ``limits.password_hash_threads`` worker
  threads, and each client host may have at most ``limits.password_hashes_per_host``
  of them running or queued: its further logins wait for its own previous ones
  (first come, first served), outside the shared queue.  A flood of wrong passwords
  from one host therefore delays another host's login by at most that many hashes
  per thread, however many connections the flood opens; the flood's own logins run
  into the authentication timeout instead.
"""

from __future__ import annotations

from typing import Any, Callable

import trio

from authz.credentials import VerifiedPasswords

__all__ = ["PasswordHashing"]


class _HostTurn:
    __slots__ = ("slots", "users")

    def __init__(self, n: int) -> None:
        self.slots = trio.Semaphore(n)  # FIFO: Trio wakes waiters in order
        self.users = 0


class PasswordHashing:
    """The worker threads for stretched hashes and each client host's turn for them."""

    def __init__(self, threads: int, per_host: int, verified: VerifiedPasswords | None = None) -> None:
        self.limiter = trio.CapacityLimiter(threads)
        self.per_host = per_host
        self.verified = verified if verified is not None else VerifiedPasswords()
        self._hosts: dict[str, _HostTurn] = {}
        #: hashes run to their end (tests count them)
        self.runs = 0

    async def run(self, host: str, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on a hashing thread once ``host`` has its turn."""
        turn = self._hosts.get(host)
        if turn is None:
            turn = self._hosts[host] = _HostTurn(self.per_host)
        turn.users += 1
        try:
            async with turn.slots:
                try:
                    return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter)
                finally:
                    self.runs += 1
        finally:
            turn.users -= 1
            if not turn.users:
                del self._hosts[host]

    def waiting_hosts(self) -> int:
        return len(self._hosts)
