"""JSON API under /api/v1: thin routes over the inventory's domain functions."""
