"""A2A (the Agent2Agent protocol, `a2a-sdk`, the `a2a` extra): A2A agents as
subagents here (`remote.py`), and our subagents served as A2A agents (`serve.py`);
`mapping.py` is the pure translation both ways."""
