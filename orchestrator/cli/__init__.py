"""The `orchestrator` command: `main.py` reads the command line, `dispatch.py` carries it out."""
