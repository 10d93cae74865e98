"""Each provider's wire format, decoded into one event stream (pure)."""
