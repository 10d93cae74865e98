"""`python -m orchestrator …` is the `orchestrator` command."""

import sys

try:
    from orchestrator.cli.main import main
except KeyboardInterrupt:  # (Ctrl-C before the command line is even read: one line)
    print("interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
