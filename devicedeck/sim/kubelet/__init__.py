"""A simulated kubelet speaking the kubelet's device protocols over real unix sockets."""

from devicedeck.sim.kubelet.admission import AdmissionError
from devicedeck.sim.kubelet.kubelet import SimKubelet
from devicedeck.sim.kubelet.pods import ContainerSpec, Pod

__all__ = ["AdmissionError", "ContainerSpec", "Pod", "SimKubelet"]
