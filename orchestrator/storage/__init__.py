"""The run journal and the storage backends behind it."""
