"""Run the soak and fault scenarios; print a Markdown table per scenario.

    python -m bench.soak                       # every scenario (a few minutes)
    python -m bench.soak resume slow           # some of them

Scenarios: resume (1,000 disconnect/resume cycles), slow (stalled and slow clients
vs run time and memory), storage (Redis killed and restarted under a run),
provider (a provider that hangs, floods or sends garbage), fuzz (hypothesis-made
frames), runs (3,000 small runs vs memory), webhooks (1,000 deliveries to a receiver
that fails one in three, across a restart: nothing lost, nothing twice under two ids).
Everything runs on loopback and stops by itself.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import trio

from bench.soak import (
    fuzz_frames,
    many_runs,
    provider_faults,
    resume,
    slow_clients,
    storage_outage,
    webhooks,
)

SCENARIOS: dict[str, Callable[[], Awaitable[list[str]]]] = {
    "resume": resume.main,
    "slow": slow_clients.main,
    "storage": storage_outage.main,
    "provider": provider_faults.main,
    "fuzz": fuzz_frames.main,
    "runs": many_runs.main,
    "webhooks": webhooks.main,
}


def main(argv: list[str]) -> int:
    names = argv or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)} (known: {', '.join(SCENARIOS)})")
        return 2
    for name in names:
        print(f"\n## {name}\n", flush=True)
        lines = trio.run(_bounded, SCENARIOS[name])
        print("\n".join(lines), flush=True)
    return 0


async def _bounded(scenario: Callable[[], Awaitable[list[str]]]) -> list[str]:
    with trio.fail_after(600):  # every scenario stops by itself; this is the backstop
        return await scenario()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
