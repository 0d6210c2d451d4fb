"""What the cluster watcher stored from the Kubernetes API: pods that request devices, nodes'
state, extended resources."""
