r"""One tree run, nothing else: for instruction counts under callgrind.

Wall-clock figures on a shared machine swing by tens of percent; instructions do
not. Two runs with different delta counts, subtracted, give the instructions per
event with the start-up cancelled out:

    valgrind --tool=callgrind --callgrind-out-file=/dev/null \
        .venv/bin/python -m bench.tree_once --deltas 5000 [--yielding]
"""

from __future__ import annotations

import argparse
import functools

import trio

from bench.tree_bench import run_tree


def parser() -> argparse.ArgumentParser:
    """The command line (docs/benchmarks.md shows it; tests/unit/test_doc_examples.py parses it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fanout", type=int, default=4)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--deltas", type=int, default=5000, help="text deltas per agent")
    parser.add_argument("--yielding", action="store_true", help="a checkpoint per delta")
    return parser


def main() -> None:
    args = parser().parse_args()
    result = trio.run(
        functools.partial(
            run_tree, args.fanout, args.depth, args.deltas, 4096, yielding=args.yielding
        )
    )
    print(f"{result['events']} events")


if __name__ == "__main__":
    main()
