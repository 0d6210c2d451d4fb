"""Kubernetes API integration: node status, pods, DRA objects, extended resources.

Importing this package does nothing; the watcher starts only when the service is configured
with DEVICEDECK_KUBE=incluster or kubeconfig.
"""
