"""The web server's open connections: bounded per client and in all, the longest-waiting one evicted first."""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple


class Timeouts(NamedTuple):
    """Seconds a connection gets for its TLS handshake, its request headers and its request body."""

    handshake: float = 5.0
    header: float = 5.0
    body: float = 5.0


class Conn:
    """One connection: whose, its streams, since when, and whether it is waiting for a request (then it may be evicted)."""

    def __init__(self, client: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.client, self.reader, self.writer = client, reader, writer
        self.since = time.monotonic()
        self.waiting = True


class Connections:
    """Admits connections within `limit` in all and `per_client` per client address (loop thread only)."""

    def __init__(self, limit: int, per_client: int) -> None:
        self.limit, self.per_client = limit, per_client
        self._by_client: dict[str, list[Conn]] = {}
        self._count = 0

    def all(self) -> list[Conn]:
        """Every open connection."""
        return [c for cs in self._by_client.values() for c in cs]

    def admit(self, conn: Conn) -> bool:
        """Take a new connection in, evicting a waiting one if a bound is reached; False when none can go."""
        mine = self._by_client.setdefault(conn.client, [])
        if len(mine) >= self.per_client and not self._evict(mine):
            return False
        if self._count >= self.limit and not self._evict(self.all()):
            return False
        mine.append(conn)
        self._count += 1
        return True

    def _evict(self, crowd: list[Conn]) -> bool:
        # The connection that has spent longest waiting for a request (a slow sender, an idle keep-alive) makes
        # room for the new one.
        idle = [c for c in crowd if c.waiting]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.since)
        self.release(victim)
        victim.writer.transport.abort()
        return True

    def release(self, conn: Conn) -> None:
        """Forget a closed connection."""
        mine = self._by_client.get(conn.client, [])
        if conn in mine:
            mine.remove(conn)
            self._count -= 1
        if not mine:
            self._by_client.pop(conn.client, None)
