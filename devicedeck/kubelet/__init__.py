"""The kubelet's device interfaces: protocol stubs, device plugin base, readers."""
