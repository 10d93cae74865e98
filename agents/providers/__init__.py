"""Model providers: I/O shells that turn a `ModelRequest` into `StreamPart`s."""
