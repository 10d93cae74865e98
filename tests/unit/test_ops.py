"""The ops table: every client op has a handler, and every op that names a run is
authorized against it before its handler runs."""

from __future__ import annotations

from typing import get_args

from orchestrator import protocol
from orchestrator.server.ops import OPS

RUN_FIELDS = {"run_id", "before"}
"""Fields through which an op names a run (the principal must be allowed to see it)."""


def test_every_client_op_has_a_handler() -> None:
    assert set(OPS) == set(get_args(protocol.ClientOp))
    assert set(OPS) == set(protocol.OP_TYPES.values())


def test_every_op_that_names_a_run_says_which_so_dispatch_authorizes_it() -> None:
    for op_type, entry in OPS.items():
        names_a_run = bool(RUN_FIELDS & set(op_type.__struct_fields__))
        assert (entry.run_of is not None) == names_a_run, op_type.__name__


def test_run_of_reads_the_named_run() -> None:
    cancel_run, page_before = OPS[protocol.Cancel].run_of, OPS[protocol.Runs].run_of
    assert cancel_run is not None and page_before is not None
    assert cancel_run(protocol.Cancel(op="cancel", id=1, run_id="run-1")) == "run-1"
    assert page_before(protocol.Runs(op="runs", id=2)) is None
    assert page_before(protocol.Runs(op="runs", id=3, before="run-2")) == "run-2"
