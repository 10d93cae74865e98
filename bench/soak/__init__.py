"""Soak and fault runs against a real server on loopback (not part of the test suite)."""
