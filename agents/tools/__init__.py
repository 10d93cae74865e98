"""Tools agents can call: the `Tool` protocol and its context."""
