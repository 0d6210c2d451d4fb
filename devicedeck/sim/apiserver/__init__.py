"""sim-apiserver: a stand-in for the kube-apiserver, speaking its REST API over plain HTTP.

Nodes, Pods, ResourceSlices and ResourceClaims with list, get, create, update, patch, delete
and watch; TokenRequest and TokenReview; discovery for kubectl. State is kept in a data
directory, so a restart continues with the same objects and resourceVersions.
"""

from devicedeck.sim.apiserver.server import SimApiServer

__all__ = ["SimApiServer"]
