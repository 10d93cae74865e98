"""A2A (the Agent2Agent protocol, `a2a-sdk`, the `a2a` extra), translated both ways
(`mapping.py`, pure): an A2A agent's task as a child here (the shell is
`runtime/a2a_child.py`), and a run here as an A2A task (`server/a2a_http.py`)."""
