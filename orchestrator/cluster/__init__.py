"""Cluster mode: many instances on one Redis share the runs (docs/cluster.md)."""
