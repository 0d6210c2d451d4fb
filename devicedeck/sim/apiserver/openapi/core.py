"""The core/v1 kinds this server serves: Namespaces, Nodes, Pods, Events, ServiceAccounts,
Services, ConfigMaps and Secrets."""

from __future__ import annotations

from devicedeck.sim.apiserver.openapi.model import (
    INT_OR_STRING,
    MICRO_TIME,
    OBJECT_META,
    Definition,
    Prop,
    array_of,
    boolean,
    integer,
    kind_definition,
    open_list,
    open_object,
    quantities,
    ref,
    string,
    string_map,
    strings,
    time,
)

CORE = "io.k8s.api.core.v1"
NODE_SPEC, NODE_STATUS = f"{CORE}.NodeSpec", f"{CORE}.NodeStatus"
TAINT, NODE_CONDITION = f"{CORE}.Taint", f"{CORE}.NodeCondition"
NODE_ADDRESS, NODE_INFO = f"{CORE}.NodeAddress", f"{CORE}.NodeSystemInfo"
POD_SPEC, POD_STATUS = f"{CORE}.PodSpec", f"{CORE}.PodStatus"
POD_TEMPLATE_SPEC = f"{CORE}.PodTemplateSpec"
CONTAINER, CONTAINER_PORT = f"{CORE}.Container", f"{CORE}.ContainerPort"
RESOURCES = f"{CORE}.ResourceRequirements"
OBJECT_REFERENCE, EVENT_SOURCE = f"{CORE}.ObjectReference", f"{CORE}.EventSource"
SERVICE_SPEC, SERVICE_PORT = f"{CORE}.ServiceSpec", f"{CORE}.ServicePort"
NAMESPACE_SPEC, NAMESPACE_STATUS = f"{CORE}.NamespaceSpec", f"{CORE}.NamespaceStatus"


def _core(kind: str, description: str, /, **properties: Prop) -> Definition:
    return kind_definition(f"{CORE}.{kind}", ("", "v1", kind), description, **properties)


DEFINITIONS = [
    _core(
        "Namespace",
        "A namespace: a scope for the names of namespaced objects, and a unit for access "
        "rules and quotas.",
        spec=ref(NAMESPACE_SPEC, "What the namespace is created with."),
        status=ref(NAMESPACE_STATUS, "Whether the namespace is in use or going away."),
    ),
    Definition(
        NAMESPACE_SPEC,
        "The finalizers that must run before a namespace is removed.",
        {"finalizers": strings("What must clean up before the namespace goes.")},
    ),
    Definition(
        NAMESPACE_STATUS,
        "The namespace's phase.",
        {
            "phase": string(
                "Active, or Terminating while its objects are deleted.", "Active", "Terminating"
            ),
            "conditions": open_list("Why a terminating namespace is not gone yet.", "type"),
        },
    ),
    _core(
        "Node",
        "A node: a machine pods run on. Its kubelet registers it and keeps its status: the "
        "resources it has (capacity) and can give to pods (allocatable), its conditions, "
        "addresses and software. Its spec says whether new pods may land on it.",
        spec=ref(NODE_SPEC, "How the node may be used: cordoned or not, its taints."),
        status=ref(NODE_STATUS, "What the node's kubelet last reported."),
    ),
    Definition(
        NODE_SPEC,
        "How a node is set up and may be used.",
        {
            "podCIDR": string("The range of pod IP addresses given to the node."),
            "podCIDRs": strings("The ranges of pod IP addresses, one per IP family.", "set"),
            "providerID": string("The node's ID at its cloud provider."),
            "unschedulable": boolean(
                "When true the node is cordoned: the scheduler places no new pods on it "
                "(`kubectl cordon` sets it, `kubectl uncordon` clears it)."
            ),
            "taints": array_of(TAINT, "Taints that repel pods which do not tolerate them."),
            "configSource": open_object("Deprecated: where the kubelet read its configuration."),
            "externalID": string("Deprecated."),
        },
    ),
    Definition(
        TAINT,
        "A taint on a node: pods without a matching toleration are kept off it (NoSchedule, "
        "PreferNoSchedule) or evicted from it (NoExecute).",
        {
            "key": string("The taint's key.", required=True),
            "value": string("The taint's value."),
            "effect": string(
                "What the taint does to pods that do not tolerate it.",
                "NoSchedule",
                "PreferNoSchedule",
                "NoExecute",
                required=True,
            ),
            "timeAdded": time("When a NoExecute taint was added."),
        },
        closed=True,
    ),
    Definition(
        NODE_STATUS,
        "What a node's kubelet reports about it.",
        {
            "capacity": quantities(
                "Everything the node has: cpu, memory, pods, and for every device plugin "
                "resource all its devices, healthy or not."
            ),
            "allocatable": quantities(
                "What pods may be given: capacity minus what is reserved, and for device "
                "plugin resources the healthy devices only."
            ),
            "phase": string("Deprecated: the node's lifecycle phase."),
            "conditions": array_of(
                NODE_CONDITION,
                "Ready and the pressure conditions, each True, False or Unknown.",
                merge_key="type",
            ),
            "addresses": array_of(
                NODE_ADDRESS, "How to reach the node: InternalIP, ExternalIP, Hostname."
            ),
            "daemonEndpoints": open_object("The ports the node's daemons listen on."),
            "nodeInfo": ref(NODE_INFO, "Software and identity the kubelet reports."),
            "images": open_list("Container images on the node."),
            "volumesInUse": strings("Volumes attached and mounted on the node."),
            "volumesAttached": open_list("Volumes attached to the node."),
            "config": open_object("The state of the kubelet's configuration."),
            "runtimeHandlers": open_list("The runtime handlers the container runtime offers."),
            "features": open_object("Features the node's kubelet supports."),
            "declaredFeatures": strings("Features the node declares it supports."),
        },
    ),
    Definition(
        NODE_CONDITION,
        "One condition of a node. Ready is True while the kubelet is healthy and posts its "
        "status; MemoryPressure, DiskPressure and PIDPressure are True when the node runs "
        "short; NetworkUnavailable is True when its network is not set up.",
        {
            "type": string("The condition.", required=True),
            "status": string("True, False or Unknown.", "True", "False", "Unknown", required=True),
            "reason": string("Why the condition last changed, in one word."),
            "message": string("Why the condition last changed, for people."),
            "lastHeartbeatTime": time("When the kubelet last confirmed the condition."),
            "lastTransitionTime": time("When the condition's status last changed."),
        },
    ),
    Definition(
        NODE_ADDRESS,
        "An address of a node.",
        {
            "type": string(
                "Hostname, InternalIP, ExternalIP, InternalDNS or ExternalDNS.", required=True
            ),
            "address": string("The address.", required=True),
        },
    ),
    Definition(
        NODE_INFO,
        "What the kubelet reports about the node's machine and software.",
        {
            "machineID": string("The machine's ID."),
            "systemUUID": string("The machine's system UUID."),
            "bootID": string("Changes each time the node boots."),
            "kernelVersion": string("The kernel, as uname -r reports it."),
            "osImage": string("The operating system, as /etc/os-release names it."),
            "containerRuntimeVersion": string("The container runtime and its version."),
            "kubeletVersion": string("The kubelet's version."),
            "kubeProxyVersion": string("Deprecated."),
            "operatingSystem": string("linux or windows."),
            "architecture": string("The CPU architecture: amd64, arm64, ..."),
            "swap": open_object("The node's swap."),
        },
    ),
    _core(
        "Pod",
        "A pod: containers that run together on one node, sharing its network and volumes. "
        "The scheduler binds it to a node and that node's kubelet runs it and reports its "
        "status; device plugin resources in its containers' limits get it devices.",
        spec=ref(POD_SPEC, "What the pod runs and how."),
        status=ref(POD_STATUS, "What the pod's kubelet last reported."),
    ),
    Definition(
        POD_TEMPLATE_SPEC,
        "The pods a workload creates: their metadata and spec.",
        {
            "metadata": ref(OBJECT_META, "Labels and annotations of each pod."),
            "spec": ref(POD_SPEC, "The spec of each pod."),
        },
    ),
    Definition(
        POD_SPEC,
        "What a pod runs and how.",
        {
            "containers": array_of(CONTAINER, "The pod's containers.", "name", required=True),
            "initContainers": array_of(
                CONTAINER, "Containers run one by one before the others.", "name"
            ),
            "ephemeralContainers": open_list("Containers added to debug a running pod.", "name"),
            "nodeName": string("The node the pod is bound to; set by the scheduler."),
            "nodeSelector": string_map("Labels the node must have."),
            "affinity": open_object(
                "Rules that attract the pod to nodes or other pods, or repel it."
            ),
            "tolerations": open_list("Taints the pod tolerates."),
            "topologySpreadConstraints": open_list(
                "How to spread the pod and its peers across zones, nodes and other domains."
            ),
            "schedulerName": string("The scheduler that places the pod."),
            "priorityClassName": string("The PriorityClass giving the pod its priority."),
            "priority": integer("The pod's priority, from its PriorityClass."),
            "preemptionPolicy": string("Whether the pod may preempt lower-priority pods."),
            "restartPolicy": string("When containers restart.", "Always", "OnFailure", "Never"),
            "serviceAccountName": string("The ServiceAccount the pod runs as."),
            "serviceAccount": string("Deprecated: use serviceAccountName."),
            "automountServiceAccountToken": boolean(
                "Whether its ServiceAccount's token is mounted."
            ),
            "securityContext": open_object("Security settings for every container of the pod."),
            "volumes": open_list("Volumes the pod's containers can mount.", "name"),
            "hostNetwork": boolean("Whether the pod uses the node's network namespace."),
            "hostPID": boolean("Whether the pod uses the node's process namespace."),
            "hostIPC": boolean("Whether the pod uses the node's IPC namespace."),
            "dnsPolicy": string("How the pod's DNS is set up."),
            "terminationGracePeriodSeconds": integer("Seconds the pod gets to stop.", "int64"),
            "readinessGates": open_list("Conditions that must be true for the pod to be ready."),
            "resourceClaims": open_list("DRA ResourceClaims the pod's containers use.", "name"),
            "imagePullSecrets": open_list("Secrets for pulling the pod's images.", "name"),
        },
    ),
    Definition(
        CONTAINER,
        "A container of a pod.",
        {
            "name": string("The container's name, unique in the pod.", required=True),
            "image": string("The container image."),
            "command": strings("The entrypoint; the image's own when empty."),
            "args": strings("Arguments to the entrypoint."),
            "workingDir": string("The working directory."),
            "env": open_list("Environment variables.", "name"),
            "envFrom": open_list("Sources of environment variables."),
            "ports": array_of(CONTAINER_PORT, "Ports the container listens on.", "containerPort"),
            "resources": ref(
                RESOURCES,
                "What the container requests and is limited to; a device plugin resource is "
                "asked for in limits (requests, if given, must equal them).",
            ),
            "volumeMounts": open_list("Volumes mounted into the container.", "mountPath"),
            "livenessProbe": open_object("When the container is restarted."),
            "readinessProbe": open_object("When the container takes traffic."),
            "startupProbe": open_object("When the container has started."),
            "securityContext": open_object("The container's security settings."),
            "imagePullPolicy": string(
                "When the image is pulled.", "Always", "IfNotPresent", "Never"
            ),
            "restartPolicy": string("Always, for an init container that keeps running."),
        },
    ),
    Definition(
        CONTAINER_PORT,
        "A port a container listens on.",
        {
            "containerPort": integer("The port number.", required=True),
            "name": string("A name services can point at."),
            "protocol": string("TCP, UDP or SCTP.", "TCP", "UDP", "SCTP"),
            "hostPort": integer("The node's port to expose it on."),
            "hostIP": string("The node's address to bind the host port to."),
        },
    ),
    Definition(
        RESOURCES,
        "Requests and limits of a container.",
        {
            "limits": quantities("The most the container may use."),
            "requests": quantities("What the container is scheduled with."),
            "claims": open_list("Which of the pod's ResourceClaims the container uses.", "name"),
        },
    ),
    Definition(
        POD_STATUS,
        "What a pod's kubelet last reported.",
        {
            "phase": string(
                "Where the pod is in its life.",
                "Pending",
                "Running",
                "Succeeded",
                "Failed",
                "Unknown",
            ),
            "conditions": open_list("PodScheduled, Initialized, ContainersReady, Ready.", "type"),
            "reason": string("Why the pod is in its phase, in one word."),
            "message": string("Why the pod is in its phase, for people."),
            "hostIP": string("The address of the node."),
            "podIP": string("The pod's address."),
            "podIPs": open_list("The pod's addresses, one per IP family.", "ip"),
            "startTime": time("When the kubelet accepted the pod."),
            "nominatedNodeName": string("The node the scheduler preempts pods on for this pod."),
            "qosClass": string("Guaranteed, Burstable or BestEffort."),
            "containerStatuses": open_list("The state of each container."),
            "initContainerStatuses": open_list("The state of each init container."),
            "resourceClaimStatuses": open_list("The ResourceClaims made for the pod.", "name"),
        },
    ),
    _core(
        "Event",
        "An event: something that happened to an object, reported by a component (the "
        "kubelet, a controller). Events are kept for an hour.",
        involvedObject=ref(OBJECT_REFERENCE, "The object the event is about.", required=True),
        reason=string("Why it happened, in one word (NodeReady, Started, ...)."),
        message=string("What happened, for people."),
        type=string("Normal, or Warning.", "Normal", "Warning"),
        source=ref(EVENT_SOURCE, "The component that reported it, and its host."),
        firstTimestamp=time("When it first happened."),
        lastTimestamp=time("When it last happened."),
        count=integer("How often it happened."),
        eventTime=ref(MICRO_TIME, "When it first happened, with microseconds."),
        series=open_object("How an often repeated event went on."),
        action=string("What was done, or failed."),
        related=ref(OBJECT_REFERENCE, "A second object it is about."),
        reportingComponent=string("The component that reported it."),
        reportingInstance=string("Which instance of that component."),
    ),
    Definition(
        OBJECT_REFERENCE,
        "Points at an object, or a part of one.",
        {
            "kind": string("Kind of the object."),
            "namespace": string("Namespace of the object."),
            "name": string("Name of the object."),
            "uid": string("UID of the object."),
            "apiVersion": string("API version of the object."),
            "resourceVersion": string("The version of the object meant."),
            "fieldPath": string("The part of the object meant, such as spec.containers{main}."),
        },
    ),
    Definition(
        EVENT_SOURCE,
        "Who reported an event.",
        {
            "component": string("The component (kubelet, a controller)."),
            "host": string("The node it runs on."),
        },
    ),
    _core(
        "ServiceAccount",
        "An identity for processes in pods; its tokens authenticate them to the API server.",
        secrets=array_of(OBJECT_REFERENCE, "Secrets of the account (legacy tokens).", "name"),
        imagePullSecrets=open_list("Secrets for pulling images, given to the account's pods."),
        automountServiceAccountToken=boolean("Whether pods get the account's token mounted."),
    ),
    _core(
        "Service",
        "A service: one stable address for the pods its selector picks.",
        spec=ref(SERVICE_SPEC, "How the service is reached and which pods it sends to."),
        status=open_object("The load balancer the service got, if any."),
    ),
    Definition(
        SERVICE_SPEC,
        "How a service is reached and which pods it sends to.",
        {
            "type": string(
                "How the service is exposed.",
                "ClusterIP",
                "NodePort",
                "LoadBalancer",
                "ExternalName",
            ),
            "selector": string_map("Labels of the pods the service sends to."),
            "ports": array_of(SERVICE_PORT, "The service's ports.", "port"),
            "clusterIP": string("The service's address in the cluster."),
            "clusterIPs": strings("Its addresses, one per IP family."),
            "externalIPs": strings("Addresses outside the cluster that reach it."),
            "externalName": string("The DNS name an ExternalName service points at."),
            "sessionAffinity": string("Whether a client sticks to one pod.", "ClientIP", "None"),
            "ipFamilies": strings("The IP families of its addresses."),
            "ipFamilyPolicy": string("How many IP families it has."),
            "internalTrafficPolicy": string("Whether traffic from inside stays on its node."),
            "externalTrafficPolicy": string("Whether traffic from outside stays on its node."),
            "publishNotReadyAddresses": boolean("Whether pods that are not ready are listed too."),
        },
    ),
    Definition(
        SERVICE_PORT,
        "A port of a service.",
        {
            "name": string("The port's name."),
            "port": integer("The service's port.", required=True),
            "targetPort": ref(
                INT_OR_STRING, "The pods' port: a number or a container port's name."
            ),
            "protocol": string("TCP, UDP or SCTP.", "TCP", "UDP", "SCTP"),
            "nodePort": integer("The port on every node, for NodePort and LoadBalancer."),
            "appProtocol": string("The protocol spoken on the port."),
        },
    ),
    _core(
        "ConfigMap",
        "Configuration data for pods, as key/value pairs.",
        data=string_map("The configuration, as UTF-8 strings."),
        binaryData=string_map("Binary configuration, base64 encoded."),
        immutable=boolean("Whether the data can no longer change."),
    ),
    _core(
        "Secret",
        "Sensitive data for pods, such as passwords, tokens and keys.",
        data=string_map("The data, base64 encoded."),
        stringData=string_map("Data given as plain strings, merged into data on write."),
        type=string("What the secret holds (Opaque, kubernetes.io/tls, ...)."),
        immutable=boolean("Whether the data can no longer change."),
    ),
]
