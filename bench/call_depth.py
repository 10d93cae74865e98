"""What a deeper coroutine chain and an async generator cost a yielding producer, in bare trio.

21 producers push 20,000 items each into one bounded channel (`send_nowait`) and
yield to the scheduler after every item, as a provider reading a socket does; one
consumer takes batches. Four shapes of producer:

- flat: the loop is the task's own coroutine (the tree bench's baseline);
- deep: the same loop 5 coroutine frames below the task;
- agen: items come from an async generator that checkpoints after each;
- agen deep: both — the shape of an agent's delta (tool task → agent_spawn →
  runner → loop → turn → provider stream).

    python -m bench.call_depth
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Awaitable, Callable

import trio

PRODUCERS = 21
ITEMS = 20_000


async def measure(shape: str) -> float:
    send, recv = trio.open_memory_channel[int](4096)

    async def items() -> AsyncGenerator[list[int], None]:
        for i in range(ITEMS):
            yield [i]
            await trio.lowlevel.checkpoint()

    async def flat() -> None:
        for i in range(ITEMS):
            send.send_nowait(i)
            await trio.lowlevel.checkpoint()

    async def from_generator() -> None:
        async for batch in items():
            send.send_nowait(batch[0])

    async def nested(leaf: Callable[[], Awaitable[None]], depth: int) -> None:
        if depth == 0:
            await leaf()
        else:
            await nested(leaf, depth - 1)

    async def producer() -> None:
        leaf = from_generator if shape.startswith("agen") else flat
        await nested(leaf, 5 if shape.endswith("deep") else 0)

    start = time.perf_counter()
    count, total = 0, PRODUCERS * ITEMS
    async with trio.open_nursery() as nursery:
        for _ in range(PRODUCERS):
            nursery.start_soon(producer)
        while count < total:
            await recv.receive()
            count += 1
            while True:
                try:
                    recv.receive_nowait()
                except trio.WouldBlock:
                    break
                count += 1
    return total / (time.perf_counter() - start)


async def main() -> None:
    shapes = ["flat", "deep", "agen", "agen deep"]
    rates: dict[str, list[float]] = {shape: [] for shape in shapes}
    for _ in range(3):  # round-robin, medians
        for shape in shapes:
            rates[shape].append(await measure(shape))
    flat = sorted(rates["flat"])[1]
    for shape in shapes:
        median = sorted(rates[shape])[1]
        print(f"{shape:<10}{median:>12,.0f} items/s  {median / flat:.2f}× flat")


if __name__ == "__main__":
    trio.run(main)
