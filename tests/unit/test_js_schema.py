"""The TypeScript package's wire types (`js/src/schema.ts`) are what `js/schema_ts.py`
writes from the server's own types: a payload or frame that changes here changes
there, or this fails."""

from __future__ import annotations

import importlib.util

from tests.helpers import REPO


def test_the_typescript_schema_is_generated_from_the_servers_types() -> None:
    spec = importlib.util.spec_from_file_location("schema_ts", REPO / "js" / "schema_ts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    written = (REPO / "js" / "src" / "schema.ts").read_text(encoding="utf-8")
    assert module.render() == written, (
        "js/src/schema.ts is stale: .venv/bin/python js/schema_ts.py > js/src/schema.ts"
    )
    assert "any" not in written.replace("Company", "").split()  # (`unknown`, never `any`)
