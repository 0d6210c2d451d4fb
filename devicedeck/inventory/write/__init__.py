"""The write path: snapshots from node agents applied to the streams' rows, with their receipts,
and the other writers of those rows (the cluster watcher, derived health, the stale sweep)."""
