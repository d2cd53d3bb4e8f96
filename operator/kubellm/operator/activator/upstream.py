"""Where the ready replicas are: the A records of a headless Service of the serving pods.

A headless Service without publishNotReadyAddresses lists only ready pods, so the
activator needs no API access (no token) to know when the first replica is ready.
"""
from __future__ import annotations

import asyncio
import itertools
import socket
from collections.abc import Awaitable, Callable

Resolver = Callable[[str], Awaitable[list[str]]]


async def resolve_dns(host: str) -> list[str]:
    """IPs the host name resolves to now; [] when it does not (no ready pod yet)."""
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None,
                                                             type=socket.SOCK_STREAM)
    except (socket.gaierror, OSError):
        return []
    return sorted({info[4][0] for info in infos})


class Upstreams:
    """The current addresses, refreshed every ``interval`` seconds by ``run``."""

    def __init__(self, host: str, port: int, interval: float,
                 resolver: Resolver = resolve_dns):
        self.host, self.port, self.interval, self.resolver = host, port, interval, resolver
        self.addresses: list[str] = []
        self._changed = asyncio.Event()
        self._turn = itertools.count()

    async def refresh(self) -> None:
        found = await self.resolver(self.host)
        if found != self.addresses:
            self.addresses = found
            self._changed.set()
            self._changed = asyncio.Event()

    async def run(self) -> None:
        while True:
            await self.refresh()
            await asyncio.sleep(self.interval)

    def pick(self, avoid: set[str] = frozenset()) -> str | None:
        """An address to send to (round robin), skipping ones that just failed."""
        usable = [a for a in self.addresses if a not in avoid]
        if not usable:
            return None
        return usable[next(self._turn) % len(usable)]

    async def wait(self, timeout: float) -> bool:
        """Wait until there is an address; False when ``timeout`` passes first."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.addresses:
            left = deadline - loop.time()
            if left <= 0:
                return False
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                return False
        return True

    def url(self, address: str, path_qs: str) -> str:
        host = f"[{address}]" if ":" in address else address
        return f"http://{host}:{self.port}{path_qs}"
