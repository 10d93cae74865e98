"""Running runs: start, cancel, send, resume from the journal (below server and cluster).

`host.RunHost` executes runs in this process, journaled; `resume` rebuilds a run
from its journal to continue it; `service.RunService` is what a front end (the
WebSocket server) asks of runs, whether they run here (`RunHost`) or in a cluster
(`cluster.gateway.ClusterGateway`).
"""
