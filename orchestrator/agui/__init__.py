"""AG-UI: a run as the AG-UI event stream (docs/integrations.md)."""
