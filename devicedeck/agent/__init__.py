"""The node agent: reads the kubelet's device interfaces and keeps the service's view of the
node current, through kubelet restarts, service outages and bad answers.

Sources (kubelet_reader, taps) produce snapshots (snapshots, derived); the pusher sends the
latest snapshot of each stream to the service; agent wires them together and owns every
thread.
"""
