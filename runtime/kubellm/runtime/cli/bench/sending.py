"""What the benchmark client records per request, and how it sends a load on time: shared
by ``bench serve``'s in-loop client (serve.py) and its client processes (client_procs.py)."""
from __future__ import annotations

import asyncio
import dataclasses
import time


@dataclasses.dataclass
class Sample:
    """One request as the client saw it; times in seconds from its send."""
    ttft: float | None = None
    latency: float | None = None
    gaps: list[float] = dataclasses.field(default_factory=list)
    num_output_tokens: int = 0
    error: str | None = None


async def send_at(prompts, offsets, start: float, send) -> list[Sample]:
    """``send(prompt)`` for each prompt ``offset`` seconds after ``start`` (on
    time.monotonic, which client processes share); the samples in order."""
    async def at(offset, prompt):
        await asyncio.sleep(max(0.0, start + offset - time.monotonic()))
        return await send(prompt)
    return list(await asyncio.gather(*(at(o, p) for o, p in zip(offsets, prompts))))
