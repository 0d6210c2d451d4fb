"""Simulated device plugins, kubelet and nodes speaking the kubelet's real protocols."""
