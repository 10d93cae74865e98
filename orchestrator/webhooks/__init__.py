"""Webhooks out: journaled events delivered to other systems, signed, at least once
(docs/webhooks.md#webhooks-out)."""
