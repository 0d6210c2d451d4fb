"""`kubectl kustomize` renders the base and each optional component as `kubectl apply -k`
would; everything a rendered object points at (selectors, ports, Services) exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .manifests import (
    BASE,
    COMPONENT_DIRS,
    COMPONENTS,
    MONITORING,
    Obj,
    kustomize,
    load,
    manifest_files,
    overlay,
    pod_labels,
    selects,
)

Key = tuple[str, str, str]  # kind, namespace, name


def key(obj: Obj) -> Key:
    metadata = obj["metadata"]
    return (obj["kind"], metadata.get("namespace", ""), metadata["name"])


def keys(objects: list[Obj]) -> set[Key]:
    return {key(o) for o in objects}


BASE_KEYS = keys([o for f, o in BASE if not f.endswith("secrets.example.yaml")])


def component_files(component: Path) -> list[Path]:
    if component.name == "monitoring":
        return manifest_files(MONITORING)
    return manifest_files(component)


def test_the_base_renders_its_files_and_nothing_optional() -> None:
    rendered = kustomize(COMPONENTS.parent)
    assert keys(rendered) == BASE_KEYS
    kinds = {o["kind"] for o in rendered}
    assert not kinds & {"NetworkPolicy", "Ingress", "PrometheusRule", "ServiceMonitor"}
    for obj in rendered:
        for container in (
            obj.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])
        ):
            assert container["image"] == "devicedeck:0.1.0"


@pytest.mark.parametrize("component", COMPONENT_DIRS, ids=lambda d: d.name)
def test_each_component_adds_its_objects_to_the_base(component: Path, tmp_path: Path) -> None:
    rendered = kustomize(overlay(tmp_path, [component]))
    added = keys([o for _, o in load(component_files(component))])
    if component.name == "monitoring":
        added.add(("ConfigMap", "devicedeck", "devicedeck-grafana-dashboard"))
    assert keys(rendered) == BASE_KEYS | added


def test_monitoring_component_carries_the_dashboard_as_it_is(tmp_path: Path) -> None:
    rendered = kustomize(overlay(tmp_path, [COMPONENTS / "monitoring"]))
    (config_map,) = [o for o in rendered if o["kind"] == "ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(config_map["data"]["devicedeck.json"])
    assert board == json.loads((MONITORING / "grafana-dashboard.json").read_text())


def test_with_every_component_each_reference_resolves(tmp_path: Path) -> None:
    rendered = kustomize(overlay(tmp_path, COMPONENT_DIRS))
    by_key = {key(o): o for o in rendered}
    workloads = [o for o in rendered if o["kind"] in ("Deployment", "DaemonSet")]
    services = [o for o in rendered if o["kind"] == "Service"]
    namespaces = {o["metadata"]["name"] for o in rendered if o["kind"] == "Namespace"}

    def pods_of(namespace: str, selector: dict[str, str]) -> list[Obj]:
        return [
            w
            for w in workloads
            if w["metadata"]["namespace"] == namespace and selects(selector, pod_labels(w))
        ]

    def port_names(workload: Obj) -> set[str]:
        spec = workload["spec"]["template"]["spec"]
        return {p["name"] for c in spec["containers"] for p in c.get("ports", [])}

    for obj in rendered:
        namespace = obj["metadata"].get("namespace")
        assert namespace is None or namespace in namespaces, key(obj)
    for service in services:
        (workload,) = pods_of(service["metadata"]["namespace"], service["spec"]["selector"])
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names(workload), key(service)
    for obj in rendered:
        kind, namespace = obj["kind"], obj["metadata"].get("namespace", "")
        if kind == "Ingress":
            for rule in obj["spec"]["rules"]:
                for path in rule["http"]["paths"]:
                    backend = path["backend"]["service"]
                    service = by_key[("Service", namespace, backend["name"])]
                    names = {p["name"] for p in service["spec"]["ports"]}
                    assert backend["port"]["name"] in names
            assert obj["spec"]["tls"][0]["secretName"]
        elif kind in ("NetworkPolicy", "PodDisruptionBudget"):
            spec = obj["spec"]
            selector = (spec.get("podSelector") or spec.get("selector"))["matchLabels"]
            assert pods_of(namespace, selector), key(obj)
        elif kind == "ServiceMonitor":
            (target_namespace,) = obj["spec"]["namespaceSelector"]["matchNames"]
            selector = obj["spec"]["selector"]["matchLabels"]
            assert [
                s
                for s in services
                if s["metadata"]["namespace"] == target_namespace
                and selects(selector, s["metadata"]["labels"])
            ], key(obj)
        elif kind == "PodMonitor":
            (target_namespace,) = obj["spec"]["namespaceSelector"]["matchNames"]
            (workload,) = pods_of(target_namespace, obj["spec"]["selector"]["matchLabels"])
            for endpoint in obj["spec"]["podMetricsEndpoints"]:
                assert endpoint["port"] in port_names(workload)
        elif kind == "ClusterRoleBinding":
            for subject in obj["subjects"]:
                assert ("ServiceAccount", subject["namespace"], subject["name"]) in by_key


def server_env(rendered: list[Obj]) -> dict[str, str]:
    (deployment,) = [o for o in rendered if key(o) == ("Deployment", "devicedeck", "devicedeck")]
    (server,) = [c for c in deployment["spec"]["template"]["spec"]["containers"]]
    return {e["name"]: e.get("value", "") for e in server["env"]}


def test_behind_the_tls_ingress_cookies_are_secure(tmp_path: Path) -> None:
    """The Ingress terminates TLS and talks plain HTTP to the service: the component sets
    DEVICEDECK_SECURE_COOKIES so the session cookie is Secure anyway; the base does not."""
    assert "DEVICEDECK_SECURE_COOKIES" not in server_env(kustomize(COMPONENTS.parent))
    rendered = kustomize(overlay(tmp_path, [COMPONENTS / "ingress-tls"]))
    env = server_env(rendered)
    assert env["DEVICEDECK_SECURE_COOKIES"] == "true"
    # All its requests come from the controller's few addresses.
    assert int(env["DEVICEDECK_MAX_CONNECTIONS_PER_CLIENT"]) > 1000
    assert env["DEVICEDECK_AUTH"] == "token"  # the base's settings are kept


def container(rendered: list[Obj], kind: str, name: str) -> Obj:
    (workload,) = [o for o in rendered if (o["kind"], o["metadata"]["name"]) == (kind, name)]
    (first, *_) = workload["spec"]["template"]["spec"]["containers"]
    return dict(first, pod=workload["spec"]["template"]["spec"])


def test_with_service_tls_the_service_serves_https_and_agents_check_its_ca(
    tmp_path: Path,
) -> None:
    plain = kustomize(COMPONENTS.parent)
    assert "https://" not in json.dumps(plain) and "--ca-file" not in json.dumps(plain)
    rendered = kustomize(
        overlay(
            tmp_path,
            [COMPONENTS / "ingress-tls", COMPONENTS / "service-tls"],
        )
    )
    server = container(rendered, "Deployment", "devicedeck")
    assert "--ssl-certfile=/etc/devicedeck/tls/tls.crt" in server["args"]
    assert "--ssl-keyfile=/etc/devicedeck/tls/tls.key" in server["args"]
    mounts = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
    assert mounts["server-tls"] == "/etc/devicedeck/tls"
    volumes = {v["name"]: v for v in server["pod"]["volumes"]}
    assert volumes["server-tls"]["secret"]["secretName"] == "devicedeck-server-tls"
    # The key is readable by the server's group, which the server runs as.
    assert (
        server["pod"]["securityContext"]["fsGroup"]
        == server["pod"]["securityContext"]["runAsGroup"]
    )
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert server[probe]["httpGet"]["scheme"] == "HTTPS"
    agent = container(rendered, "DaemonSet", "devicedeck-agent")
    args = agent["args"]
    assert args[args.index("--server") + 1] == "https://devicedeck.devicedeck.svc:8000"
    assert "--ca-file=/etc/devicedeck/ca/ca.crt" in args
    (ca_volume,) = [v for v in agent["pod"]["volumes"] if v["name"] == "server-ca"]
    assert ca_volume["configMap"]["name"] == "devicedeck-server-ca"
    (ingress,) = [o for o in rendered if o["kind"] == "Ingress"]
    assert ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/backend-protocol"] == (
        "HTTPS"
    )


def test_cert_manager_makes_the_secret_service_tls_mounts(tmp_path: Path) -> None:
    rendered = kustomize(
        overlay(
            tmp_path,
            [COMPONENTS / "service-tls", COMPONENTS / "service-tls-cert-manager"],
        )
    )
    (certificate,) = [o for o in rendered if o["kind"] == "Certificate"]
    assert set(certificate["spec"]) >= {"secretName", "dnsNames", "issuerRef", "usages"}
    assert "server auth" in certificate["spec"]["usages"]
    server = container(rendered, "Deployment", "devicedeck")
    (volume,) = [v for v in server["pod"]["volumes"] if v["name"] == "server-tls"]
    assert certificate["spec"]["secretName"] == volume["secret"]["secretName"]
    (service,) = [
        o for o in rendered if o["kind"] == "Service" and o["metadata"]["name"] == "devicedeck"
    ]
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    assert f"{name}.{namespace}.svc" in certificate["spec"]["dnsNames"]
    agent = container(rendered, "DaemonSet", "devicedeck-agent")
    server_url = agent["args"][agent["args"].index("--server") + 1]
    assert server_url.startswith(f"https://{name}.{namespace}.svc:")
