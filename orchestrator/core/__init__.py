"""Sans-I/O core: the event model and the hierarchical bus."""
