"""The agent runtime: specs, the runner, providers, tools (imports nothing of `orchestrator`)."""
