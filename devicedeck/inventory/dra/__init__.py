"""Dynamic Resource Allocation: devices as ResourceSlices publish them, who holds them through
which claims, and their health."""
