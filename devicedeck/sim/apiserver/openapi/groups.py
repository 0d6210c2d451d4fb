"""The kinds of the named groups: workloads (apps), disruption budgets (policy), RBAC,
network policies and ingresses, priority classes, leases, the DRA objects, and the reviews."""

from __future__ import annotations

from devicedeck.sim.apiserver.openapi.core import POD_TEMPLATE_SPEC
from devicedeck.sim.apiserver.openapi.model import (
    INT_OR_STRING,
    LABEL_SELECTOR,
    MICRO_TIME,
    Definition,
    Prop,
    array_of,
    boolean,
    integer,
    kind_definition,
    open_list,
    open_object,
    ref,
    string,
    strings,
)

APPS = "io.k8s.api.apps.v1"
RBAC = "io.k8s.api.rbac.v1"
POLICY_RULE, ROLE_REF, SUBJECT = f"{RBAC}.PolicyRule", f"{RBAC}.RoleRef", f"{RBAC}.Subject"
LEASE_SPEC = "io.k8s.api.coordination.v1.LeaseSpec"


def _kind(
    package: str, group: str, kind: str, description: str, /, **properties: Prop
) -> Definition:
    return kind_definition(f"{package}.{kind}", (group, "v1", kind), description, **properties)


def _workload(kind: str, description: str, spec: dict[str, Prop]) -> list[Definition]:
    spec_name = f"{APPS}.{kind}Spec"
    return [
        _kind(
            APPS,
            "apps",
            kind,
            description,
            spec=ref(spec_name, f"The pods the {kind} runs, and how it replaces them."),
            status=open_object(f"What the {kind} controller last observed."),
        ),
        Definition(
            spec_name,
            f"What a {kind} runs.",
            {
                "selector": ref(LABEL_SELECTOR, "The labels of the pods it manages.", True),
                "template": ref(POD_TEMPLATE_SPEC, "The pods it creates.", True),
                "minReadySeconds": integer(
                    "Seconds a new pod must be ready to count as available."
                ),
                "revisionHistoryLimit": integer("How many old revisions are kept for rollback."),
                **spec,
            },
        ),
    ]


def _rbac(kind: str, description: str, /, **properties: Prop) -> Definition:
    return _kind(RBAC, "rbac.authorization.k8s.io", kind, description, **properties)


def _review(package: str, group: str, kind: str, description: str) -> Definition:
    return _kind(
        package,
        group,
        kind,
        description,
        spec=open_object("What is asked."),
        status=open_object("The answer."),
    )


RULES = array_of(POLICY_RULE, "The permissions granted.")
BINDING = {
    "roleRef": ref(ROLE_REF, "The role granted.", required=True),
    "subjects": array_of(SUBJECT, "Who the role is granted to."),
}

DEFINITIONS = [
    *_workload(
        "Deployment",
        "A Deployment keeps a number of identical pods running and rolls them over to a new "
        "template. Here it is stored as written: no controller creates its pods.",
        {
            "replicas": integer("How many pods to run."),
            "strategy": open_object("How old pods are replaced: Recreate or RollingUpdate."),
            "progressDeadlineSeconds": integer("Seconds a rollout may take to make progress."),
            "paused": boolean("Whether rollouts are paused."),
        },
    ),
    *_workload(
        "DaemonSet",
        "A DaemonSet runs one pod on every node its template selects. Here it is stored as "
        "written: no controller creates its pods.",
        {"updateStrategy": open_object("How pods are replaced: OnDelete or RollingUpdate.")},
    ),
    *_workload(
        "StatefulSet",
        "A StatefulSet runs pods with stable names and storage. Here it is stored as "
        "written: no controller creates its pods.",
        {
            "replicas": integer("How many pods to run."),
            "serviceName": string("The headless service that names its pods."),
            "volumeClaimTemplates": open_list("Claims each pod gets storage from."),
            "podManagementPolicy": string(
                "Whether pods start in order.", "OrderedReady", "Parallel"
            ),
            "updateStrategy": open_object("How pods are replaced."),
            "persistentVolumeClaimRetentionPolicy": open_object("What happens to its claims."),
            "ordinals": open_object("Where the numbering of its pods starts."),
        },
    ),
    _kind(
        "io.k8s.api.policy.v1",
        "policy",
        "PodDisruptionBudget",
        "Limits how many of the pods it selects voluntary disruptions (a drain) may take down "
        "at once.",
        spec=ref("io.k8s.api.policy.v1.PodDisruptionBudgetSpec", "The budget."),
        status=open_object("How many disruptions are allowed now."),
    ),
    Definition(
        "io.k8s.api.policy.v1.PodDisruptionBudgetSpec",
        "A disruption budget: one of minAvailable and maxUnavailable.",
        {
            "selector": ref(LABEL_SELECTOR, "The pods the budget covers."),
            "minAvailable": ref(INT_OR_STRING, "Pods that must stay available: a number or %."),
            "maxUnavailable": ref(INT_OR_STRING, "Pods that may be unavailable: a number or %."),
            "unhealthyPodEvictionPolicy": string("When pods that are not ready may be evicted."),
        },
    ),
    _rbac("Role", "Permissions within one namespace.", rules=RULES),
    _rbac(
        "ClusterRole",
        "Permissions across the cluster, or a set to grant in namespaces.",
        rules=RULES,
        aggregationRule=open_object("Labels of ClusterRoles whose rules this one gathers."),
    ),
    _rbac("RoleBinding", "Grants a Role or ClusterRole within one namespace.", **BINDING),
    _rbac("ClusterRoleBinding", "Grants a ClusterRole across the cluster.", **BINDING),
    Definition(
        POLICY_RULE,
        "Verbs allowed on resources (or on non-resource URLs).",
        {
            "apiGroups": strings('The API groups; "" is the core group.'),
            "resources": strings("The resources, such as pods or nodes/status."),
            "resourceNames": strings("Only these objects, when given."),
            "verbs": strings(
                "The verbs: get, list, watch, create, update, patch, delete.", "atomic"
            ),
            "nonResourceURLs": strings("URLs that are not resources, such as /healthz."),
        },
    ),
    Definition(
        ROLE_REF,
        "The role a binding grants.",
        {
            "apiGroup": string("rbac.authorization.k8s.io.", required=True),
            "kind": string("Role or ClusterRole.", required=True),
            "name": string("The role's name.", required=True),
        },
    ),
    Definition(
        SUBJECT,
        "Who a binding grants a role to.",
        {
            "kind": string("User, Group or ServiceAccount.", required=True),
            "name": string("The subject's name.", required=True),
            "namespace": string("The ServiceAccount's namespace."),
            "apiGroup": string("The subject's API group; empty for ServiceAccounts."),
        },
    ),
    _kind(
        "io.k8s.api.networking.v1",
        "networking.k8s.io",
        "NetworkPolicy",
        "Which traffic may reach and leave the pods it selects. Stored as written here.",
        spec=open_object("The pods selected, and the ingress and egress rules."),
    ),
    _kind(
        "io.k8s.api.networking.v1",
        "networking.k8s.io",
        "Ingress",
        "HTTP routes from outside the cluster to services. Stored as written here.",
        spec=open_object("The hosts, paths, backends and TLS settings."),
        status=open_object("The load balancer serving it."),
    ),
    _kind(
        "io.k8s.api.scheduling.v1",
        "scheduling.k8s.io",
        "PriorityClass",
        "A priority pods can name: higher ones are scheduled first and may preempt lower ones.",
        value=integer("The priority.", required=True),
        globalDefault=boolean("Whether pods without a class get this one."),
        description=string("What the class is for."),
        preemptionPolicy=string(
            "Whether its pods preempt others.", "PreemptLowerPriority", "Never"
        ),
    ),
    _kind(
        "io.k8s.api.coordination.v1",
        "coordination.k8s.io",
        "Lease",
        "A lease held by one holder at a time. Every node's kubelet renews one in "
        "kube-node-lease as its heartbeat; the service's replicas elect their leader with one.",
        spec=ref(LEASE_SPEC, "Who holds the lease, and until when."),
    ),
    Definition(
        LEASE_SPEC,
        "Who holds a lease, and until when.",
        {
            "holderIdentity": string("Who holds the lease."),
            "leaseDurationSeconds": integer("Seconds after its last renewal that the lease ends."),
            "acquireTime": ref(MICRO_TIME, "When the holder took the lease."),
            "renewTime": ref(MICRO_TIME, "When the holder last renewed it."),
            "leaseTransitions": integer("How often the lease changed hands."),
            "strategy": string("How a new holder is chosen."),
            "preferredHolder": string("Who should hold the lease next."),
        },
    ),
    _kind(
        "io.k8s.api.resource.v1",
        "resource.k8s.io",
        "ResourceSlice",
        "Devices a DRA driver offers, in a pool on one node or several.",
        spec=open_object("The driver, the pool, the node and the devices with their attributes."),
    ),
    _kind(
        "io.k8s.api.resource.v1",
        "resource.k8s.io",
        "ResourceClaim",
        "A request for DRA devices, and the devices allocated to it.",
        spec=open_object("The devices asked for."),
        status=open_object("The allocation, the pods it is reserved for, device conditions."),
    ),
    _review(
        "io.k8s.api.authentication.v1",
        "authentication.k8s.io",
        "TokenReview",
        "Asks who a bearer token belongs to.",
    ),
    _review(
        "io.k8s.api.authentication.v1",
        "authentication.k8s.io",
        "SelfSubjectReview",
        "Asks who the caller is.",
    ),
    _review(
        "io.k8s.api.authorization.v1",
        "authorization.k8s.io",
        "SelfSubjectAccessReview",
        "Asks whether the caller may do one thing.",
    ),
    _review(
        "io.k8s.api.authorization.v1",
        "authorization.k8s.io",
        "SelfSubjectRulesReview",
        "Asks what the caller may do in a namespace.",
    ),
]
