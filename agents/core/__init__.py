"""The sans-I/O core of the agent runtime: messages, events, SSE, the turn loop, payloads."""
