"""The domain: devices, allocations, events, and how snapshots change them."""
