"""`python -m orchestrator …` is the `orchestrator` command."""

import sys

from orchestrator.cli.main import main

sys.exit(main())
