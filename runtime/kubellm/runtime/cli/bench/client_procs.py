"""The serving benchmark's HTTP client spread over processes (``bench serve
--client-processes N``).

One Python process sends a burst's requests one after another. On the H200's host
(2026-12-02, call 15) the 64 bodies of a 64-request burst reached the API servers over
10.6 ms, about 165 µs of client work each. The in-process comparator adds all 64 at once
and pays none of it, and neither would 64 independent clients. Here N processes each
send their share of a load (request i goes to process i % N) at the schedule's times
from one start they all share, each on its own pool of connections opened before the
load. The samples come back in the load's order.

Each child reports when its last request ended: the load's wall time is the latest of
those, so pickling the samples back is not counted.
"""
from __future__ import annotations

import asyncio
import multiprocessing
import time

# The start of a load is set this far after its bodies reached every process, so that
# all of them are waiting for it (the clock is CLOCK_MONOTONIC, the same in every
# process of the host).
START_LEAD_S = 0.02


def _child(conn, client_args: tuple) -> None:
    asyncio.run(_serve_commands(conn, client_args))


async def _serve_commands(conn, client_args: tuple) -> None:
    from kubellm.runtime.cli.bench.http_client import PooledClient
    from kubellm.runtime.cli.bench.sending import Sample, send_at
    async with PooledClient(*client_args, Sample) as client:
        conn.send("ready")
        while True:
            # between loads nothing else runs here: a blocking read is enough
            command, payload = conn.recv()
            if command == "open":
                await client.open_connections(payload)
                conn.send("opened")
            elif command == "bodies":
                bodies, offsets = payload
                conn.send("loaded")
                start = conn.recv()
                cpu = time.process_time()
                samples = await send_at(bodies, offsets, start, client.complete)
                conn.send((samples, time.monotonic(), time.process_time() - cpu))
            else:
                return


class ClientProcesses:
    """``with ClientProcesses(n, client_args) as pool``: ``pool.run(bodies, offsets,
    connections)`` per load -> (samples in order, wall seconds, the children's CPU
    seconds). ``client_args``: PooledClient's arguments before ``new_sample``."""

    def __init__(self, num: int, client_args: tuple):
        if num < 1:
            raise ValueError(f"client processes must be >= 1, got {num}")
        self.num, self.client_args = num, client_args
        self._procs, self._conns = [], []

    def __enter__(self) -> "ClientProcesses":
        context = multiprocessing.get_context("spawn")   # no copy of this process's state
        try:
            for _ in range(self.num):
                parent, child = context.Pipe()
                proc = context.Process(target=_child, args=(child, self.client_args),
                                       daemon=True)
                proc.start()
                child.close()
                self._procs.append(proc)
                self._conns.append(parent)
            self._expect("ready")
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for conn in self._conns:
            try:
                conn.send(("close", None))
            except OSError:
                pass
        for proc in self._procs:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        for conn in self._conns:
            conn.close()

    def _expect(self, word: str) -> None:
        for i, conn in enumerate(self._conns):
            got = conn.recv()
            if got != word:
                raise RuntimeError(f"client process {i} answered {got!r}, not {word!r}")

    def shares(self, num: int) -> list[list[int]]:
        """Which requests of a load each process sends (round robin)."""
        return [list(range(i, num, self.num)) for i in range(self.num)]

    def run(self, bodies: list[bytes], offsets: list[float], connections: int,
            on_start=None):
        """One load: each process opens its share of ``connections``, then all send
        their requests at ``offsets`` seconds from one shared start (passed to
        ``on_start`` before the processes learn it)."""
        shares = self.shares(len(bodies))
        for conn, share in zip(self._conns, shares):
            due_soon = sum(1 for i in share if i < connections)
            conn.send(("open", due_soon))
        self._expect("opened")
        for conn, share in zip(self._conns, shares):
            conn.send(("bodies", ([bodies[i] for i in share], [offsets[i] for i in share])))
        self._expect("loaded")
        start = time.monotonic() + START_LEAD_S
        if on_start is not None:
            on_start(start)
        for conn in self._conns:
            conn.send(start)
        samples = [None] * len(bodies)
        ends, cpu = [], 0.0
        for conn, share in zip(self._conns, shares):
            got, end, cpu_s = conn.recv()
            for i, sample in zip(share, got):
                samples[i] = sample
            ends.append(end)
            cpu += cpu_s
        return samples, max(ends) - start, cpu
