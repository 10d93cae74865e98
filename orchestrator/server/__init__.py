"""`orchestrator serve`: WebSocket feeds of agent trees, the run journal, plain HTTP."""
