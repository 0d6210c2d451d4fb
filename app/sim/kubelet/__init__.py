"""A simulated kubelet speaking the kubelet's device protocols over real unix sockets."""

from app.sim.kubelet.admission import AdmissionError
from app.sim.kubelet.kubelet import SimKubelet
from app.sim.kubelet.pods import ContainerSpec, Pod

__all__ = ["AdmissionError", "ContainerSpec", "Pod", "SimKubelet"]
