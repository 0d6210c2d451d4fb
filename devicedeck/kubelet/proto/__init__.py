"""Generated gRPC stubs for the kubelet APIs; regenerate with `python -m devicedeck.kubelet.generate`."""
