"""The Helm chart (charts/mcp-state-guard) through the real Helm engine.

Helm v4's Go library (PyPI helm-python-sdk: libhelm_c, no helm binary) renders and lints
the chart; kubernetes-validate checks every rendered object against the Kubernetes
schemas of two versions. Reads one JSON request on stdin, prints one JSON answer:

  {"command": "render", "out": DIR}   every case: lint, validate, properties; writes each
                                      case's config, keys and rules under DIR for the
                                      sidecar's check-config and promtool
  {"command": "schema"}               invalid values, each with the schema's error
  {"command": "toml"}                 the TOML template on values that trip renderers
  {"command": "lookup"}               an upgrade keeps the generated keys (`lookup`
                                      answered by a fake API server on 127.0.0.1)
  {"command": "parent", "out": DIR}   another chart adds the sidecar with the named
                                      templates

Every answer carries "failures": a list of what did not hold, empty when all did; the
Rust test (tests/cases/helm.rs) asserts it is empty and that the checks ran.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import shutil
import sys
import threading
import tomllib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "mcp-state-guard"
NAMESPACE = "mcp"
RELEASE = "demo"
# The newest Kubernetes version kubernetes-validate has and an older supported one.
KUBE_VERSIONS = ["1.37.0", "1.35.0"]
# Custom resources: no schema in kubernetes-validate; checked field by field below.
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule", "Certificate"}
SERVER = {"image": {"repository": "example.com/legacy-mcp", "tag": "1.4.2"}}
SIDECAR = "mcp-state-guard"

failures: list[str] = []


def check(condition: bool, what: str) -> bool:
    if not condition:
        failures.append(what)
    return condition


def merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


# The default values plus the one that has no default (the server's image), and six
# feature combinations on top of it.
CASES: dict[str, dict] = {
    "defaults": {},
    "single-use-redis": {
        "singleUse": {
            "tools": ["approve_*", "pay"],
            "prompts": ["confirm_delete"],
            "redis": {"existingSecret": "redis-credentials", "secretKey": "url"},
        },
        "config": {
            "state": {"audience": "https://mcp.example.com", "ttl_seconds": 300},
            "single_use": {"tools": ["refund"], "on_store_error": "reject"},
            "idempotency": {"tools": ["create_*"], "ttl_seconds": 86400},
            "handles": [
                {
                    "kind": "import",
                    "issued_by": ["start_import"],
                    "result_pointer": "/structuredContent/importId",
                    "accepted_by": ["append_rows", "commit_import"],
                    "argument_pointer": "/importId",
                    "ttl_seconds": 3600,
                }
            ],
        },
    },
    "tls-cert-manager-mtls": {
        "tls": {
            "enabled": True,
            "clientCA": True,
            "certManager": {
                "enabled": True,
                "issuerRef": {"name": "internal-ca", "kind": "ClusterIssuer"},
                "dnsNames": ["mcp.example.com"],
            },
        },
        "config": {"principal": {"source": "mtls", "mtls": {"identity": "uri_san"}}},
    },
    "tls-secret-jwt-file": {
        "tls": {"enabled": True, "existingSecret": "mcp-tls"},
        "jwt": {
            "enabled": True,
            "issuer": "https://issuer.example.com/",
            "audience": "https://mcp.example.com",
            "jwksConfigMap": {"name": "issuer-jwks", "key": "jwks.json"},
            "resourceMetadata": "https://mcp.example.com/.well-known/oauth-protected-resource",
        },
    },
    "jwt-url-monitoring": {
        "jwt": {
            "enabled": True,
            "issuer": "https://issuer.example.com/",
            "audience": "https://mcp.example.com",
            "jwksUrl": "https://issuer.example.com/.well-known/jwks.json",
        },
        "serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}},
        "podMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
        "grafanaDashboard": {"enabled": True},
    },
    "availability": {
        "replicaCount": 3,
        "podDisruptionBudget": {"enabled": True, "minAvailable": 2},
        "autoscaling": {
            "enabled": True,
            "minReplicas": 3,
            "maxReplicas": 12,
            "targetMemoryUtilizationPercentage": 80,
        },
        "terminationGracePeriodSeconds": 120,
        "sidecar": {"preStopSleepSeconds": 10},
        "config": {"timeouts": {"drain_ms": 60000}},
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "ScheduleAnyway",
                "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": RELEASE}},
            }
        ],
    },
    "existing-keys-overrides": {
        "fullnameOverride": "billing-mcp",
        "image": {"digest": "sha256:" + "ab" * 32},
        "keys": {"existingSecret": "billing-mcp-keys", "secretKey": "ring"},
        "server": {
            "port": 8000,
            "basePath": "/api",
            "args": ["--host", "127.0.0.1", "--port", "8000"],
            "env": [{"name": "LOG_LEVEL", "value": "info"}],
        },
        "service": {"type": "LoadBalancer", "port": 443},
        "ports": {"proxy": 8443, "admin": 9443},
        "networkPolicy": {
            "proxyFrom": [{"namespaceSelector": {"matchLabels": {"team": "agents"}}}],
            "adminFrom": [{"podSelector": {"matchLabels": {"app": "vmagent"}}}],
        },
    },
    "no-network-policy": {"networkPolicy": {"enabled": False}, "server": {"outliveSidecarDrain": False}},
    # A stdio server: one container from an image holding the server and the sidecar.
    "stdio": {
        "server": {
            "image": {"repository": "example.com/stdio-mcp-with-guard", "tag": "2.0.0"},
            "env": [{"name": "LOG_LEVEL", "value": "info"}],
        },
        "stdio": {"enabled": True, "command": ["python", "/app/server.py"], "env": {"MODE": "prod"}},
        "config": {"upstream_command": {"restart_max_ms": 10000}},
    },
}


def values_of(case: str) -> dict:
    return merge({"server": SERVER}, CASES[case])


def documents(manifests: dict[str, str]) -> list[dict]:
    out = []
    for name, text in sorted(manifests.items()):
        if not name.endswith(".yaml"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                out.append(doc)
    return out


def render(chart: helm.Chart, values: dict, **kw) -> dict[str, str]:
    return chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True, **kw)


def by_kind(objects: list[dict]) -> dict[str, list[dict]]:
    kinds: dict[str, list[dict]] = {}
    for obj in objects:
        kinds.setdefault(obj["kind"], []).append(obj)
    return kinds


def validate(case: str, objects: list[dict]) -> tuple[int, set[str]]:
    validated = 0
    unvalidated: set[str] = set()
    for obj in objects:
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
                validated += 1
            except kubernetes_validate.SchemaNotFoundError:
                unvalidated.add(obj["kind"])
            except kubernetes_validate.ValidationError as e:
                path = ".".join(str(p) for p in e.path)
                failures.append(f"{case}: {obj['kind']}/{obj['metadata']['name']} invalid for Kubernetes {version}: {path}: {e.message}")
    return validated, unvalidated


def toml_config(case: str, kinds: dict[str, list[dict]], fullname: str) -> dict:
    maps = [m for m in kinds.get("ConfigMap", []) if m["metadata"]["name"] == fullname]
    check(len(maps) == 1, f"{case}: one ConfigMap named {fullname}")
    text = maps[0]["data"]["mcp-state-guard.toml"]
    try:
        return {"text": text, "parsed": tomllib.loads(text)}
    except tomllib.TOMLDecodeError as e:
        failures.append(f"{case}: the rendered TOML does not parse: {e}\n{text}")
        return {"text": text, "parsed": {}}


def integers_stay_integers(case: str, table: dict, path: str = "") -> None:
    for key, value in table.items():
        if isinstance(value, dict):
            integers_stay_integers(case, value, f"{path}{key}.")
        check(not isinstance(value, float), f"{case}: {path}{key} rendered as a float ({value})")


def pod_checks(case: str, values: dict, merged: dict, pod: dict, fullname: str, config: dict) -> None:
    spec = pod["spec"]
    containers = {c["name"]: c for c in spec["containers"]}
    if not check(SIDECAR in containers, f"{case}: the sidecar container is named {SIDECAR}"):
        return
    sidecar = containers[SIDECAR]
    ports = {p["name"]: p["containerPort"] for p in sidecar.get("ports", [])}
    check(ports == {"mcp": merged["ports"]["proxy"], "admin": merged["ports"]["admin"]}, f"{case}: sidecar ports {ports}")
    check(config.get("listen") == f"0.0.0.0:{merged['ports']['proxy']}", f"{case}: listen on all interfaces at the mcp port: {config.get('listen')}")
    check(config.get("admin_listen") == f"0.0.0.0:{merged['ports']['admin']}", f"{case}: admin_listen at the admin port: {config.get('admin_listen')}")
    for name, path in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz"), ("startupProbe", "/healthz")]:
        probe = sidecar.get(name, {}).get("httpGet", {})
        check(probe.get("path") == path and probe.get("port") == "admin", f"{case}: {name} is {path} on the admin port: {probe}")
    sc = sidecar.get("securityContext", {})
    check(sc.get("runAsNonRoot") is True, f"{case}: sidecar runAsNonRoot")
    check(sc.get("readOnlyRootFilesystem") is True, f"{case}: sidecar readOnlyRootFilesystem")
    check(sc.get("allowPrivilegeEscalation") is False, f"{case}: sidecar allowPrivilegeEscalation false")
    check(sc.get("capabilities", {}).get("drop") == ["ALL"], f"{case}: sidecar drops every capability")
    check(spec.get("securityContext", {}).get("seccompProfile", {}).get("type") == "RuntimeDefault", f"{case}: pod seccomp RuntimeDefault")
    check(spec.get("securityContext", {}).get("runAsNonRoot") is True, f"{case}: pod runAsNonRoot")
    check(bool(sidecar.get("resources", {}).get("requests")), f"{case}: sidecar resource requests")
    check(sidecar["args"] == ["run", "--config", "/etc/mcp-state-guard/config/mcp-state-guard.toml"], f"{case}: sidecar args {sidecar['args']}")
    # preStop without a shell, and a grace period covering delay + readiness grace + drain.
    pre_stop = sidecar.get("lifecycle", {}).get("preStop", {})
    check(set(pre_stop) == {"sleep"}, f"{case}: the sidecar's preStop is the native sleep action: {pre_stop}")
    delay = pre_stop.get("sleep", {}).get("seconds", 0)
    check(delay == merged["sidecar"]["preStopSleepSeconds"], f"{case}: preStop delay {delay}")
    drain_ms = config.get("timeouts", {}).get("drain_ms", 30000)
    readiness_grace = min(drain_ms / 6000, 5)
    grace = spec.get("terminationGracePeriodSeconds", 30)
    check(grace > delay + readiness_grace + drain_ms / 1000, f"{case}: terminationGracePeriodSeconds {grace} <= preStop {delay} + {readiness_grace} + drain {drain_ms / 1000}")
    if values.get("terminationGracePeriodSeconds"):
        check(grace == values["terminationGracePeriodSeconds"], f"{case}: the given grace period is kept")
    # A stdio server: the one container runs the sidecar from the server's image, with the
    # server as its child; nothing else in the pod.
    if merged["stdio"]["enabled"]:
        check(list(containers) == [SIDECAR], f"{case}: one container in stdio mode: {list(containers)}")
        image = merged["server"]["image"]
        check(sidecar.get("image") == f"{image['repository']}:{image['tag']}", f"{case}: the server's image: {sidecar.get('image')}")
        check(sidecar.get("command") == ["/usr/local/bin/mcp-state-guard"], f"{case}: the sidecar binary runs: {sidecar.get('command')}")
        check(config.get("upstream") == "stdio", f"{case}: upstream = stdio: {config.get('upstream')}")
        command = config.get("upstream_command", {})
        check(command.get("argv") == merged["stdio"]["command"], f"{case}: the child's argv: {command}")
        check(command.get("env") == merged["stdio"]["env"], f"{case}: the child's env: {command}")
        env = {e["name"] for e in sidecar.get("env", [])}
        check("LOG_LEVEL" in env, f"{case}: server.env reaches the one container: {env}")
    # The legacy server: no port anyone could target, and it outlives the drain.
    server = containers.get("server")
    if merged["stdio"]["enabled"]:
        pass
    elif check(server is not None, f"{case}: the server container"):
        check("ports" not in server, f"{case}: the server declares no port")
        if merged["server"]["outliveSidecarDrain"]:
            stop = server.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
            check(stop >= delay + readiness_grace + drain_ms / 1000, f"{case}: the server stops only after the drain ({stop})")
            check(grace > stop, f"{case}: the grace period covers the server's preStop")
        else:
            check("lifecycle" not in server, f"{case}: no server preStop when not asked")
        check(config.get("upstream", "").startswith(f"http://127.0.0.1:{merged['server']['port']}"), f"{case}: upstream on localhost: {config.get('upstream')}")
    # Volumes: whole directories (a subPath mount never sees Secret or ConfigMap updates).
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    for mount in sidecar.get("volumeMounts", []):
        check("subPath" not in mount, f"{case}: {mount['name']} mounted without subPath")
        check(mount.get("readOnly") is True, f"{case}: {mount['name']} mounted read-only")
    keys_volume = volumes.get("mcp-state-guard-keys", {}).get("secret", {})
    secret_name = merged["keys"]["existingSecret"] or f"{fullname}-keys"
    check(keys_volume.get("secretName") == secret_name, f"{case}: keys from Secret {secret_name}: {keys_volume}")
    key = merged["keys"]["secretKey"]
    check(config.get("state", {}).get("keys_file") == f"/etc/mcp-state-guard/keys/{key}", f"{case}: keys_file points into the Secret volume")
    check(volumes.get("mcp-state-guard-config", {}).get("configMap", {}).get("name") == fullname, f"{case}: config from the ConfigMap")
    check(bool(config.get("state", {}).get("audience")), f"{case}: an audience is always set")
    annotations = pod["metadata"].get("annotations", {})
    check(re.fullmatch(r"[0-9a-f]{64}", annotations.get("checksum/mcp-state-guard-restart", "")) is not None, f"{case}: restart checksum annotation")
    if merged["singleUse"]["redis"]["existingSecret"]:
        env = {e["name"]: e for e in sidecar.get("env", [])}
        ref = env.get("MCP_STATE_GUARD_SINGLE_USE__REDIS_URL", {}).get("valueFrom", {}).get("secretKeyRef", {})
        check(ref == {"name": merged["singleUse"]["redis"]["existingSecret"], "key": merged["singleUse"]["redis"]["secretKey"]}, f"{case}: Redis URL from the Secret: {ref}")
        check("redis_url" not in config.get("single_use", {}), f"{case}: the Redis URL is not in the ConfigMap")
        check(config["single_use"].get("store") == "redis", f"{case}: store = redis")
    if merged["tls"]["enabled"]:
        tls = config.get("tls", {})
        check(tls.get("cert_file") == "/etc/mcp-state-guard/tls/tls.crt" and tls.get("key_file") == "/etc/mcp-state-guard/tls/tls.key", f"{case}: TLS files: {tls}")
        check(("client_ca_file" in tls) == merged["tls"]["clientCA"], f"{case}: client CA only when asked")
        want = merged["tls"]["existingSecret"] or f"{fullname}-tls"
        check(volumes.get("mcp-state-guard-tls", {}).get("secret", {}).get("secretName") == want, f"{case}: TLS from Secret {want}")
    if merged["jwt"]["enabled"]:
        jwt = config.get("principal", {}).get("jwt", {})
        check(config["principal"].get("source") == "jwt", f"{case}: principal.source = jwt")
        check(jwt.get("issuer") == merged["jwt"]["issuer"] and jwt.get("audience") == merged["jwt"]["audience"], f"{case}: JWT issuer and audience: {jwt}")
        if merged["jwt"]["jwksUrl"]:
            check(jwt.get("jwks_url") == merged["jwt"]["jwksUrl"] and "jwks_file" not in jwt, f"{case}: JWKS URL: {jwt}")
        else:
            check(jwt.get("jwks_file") == "/etc/mcp-state-guard/jwks/jwks.json", f"{case}: JWKS file: {jwt}")
            check(volumes.get("mcp-state-guard-jwks", {}).get("configMap", {}).get("name") == merged["jwt"]["jwksConfigMap"]["name"], f"{case}: JWKS ConfigMap volume")


def case_checks(case: str, values: dict, merged: dict, objects: list[dict]) -> dict:
    kinds = by_kind(objects)
    fullname = merged["fullnameOverride"] or f"{RELEASE}-mcp-state-guard"
    for obj in objects:
        labels = obj["metadata"].get("labels", {})
        for label in ["app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version", "app.kubernetes.io/managed-by", "helm.sh/chart"]:
            check(label in labels, f"{case}: {obj['kind']}/{obj['metadata']['name']} lacks the label {label}")
    config = toml_config(case, kinds, fullname)
    parsed = config["parsed"]
    integers_stay_integers(case, parsed)
    deployments = kinds.get("Deployment", [])
    pod_spec = None
    if check(len(deployments) == 1, f"{case}: one Deployment"):
        deployment = deployments[0]
        pod = deployment["spec"]["template"]
        selector = deployment["spec"]["selector"]["matchLabels"]
        check(all(pod["metadata"]["labels"].get(k) == v for k, v in selector.items()), f"{case}: the pod carries the selector labels")
        check(("replicas" in deployment["spec"]) != merged["autoscaling"]["enabled"], f"{case}: replicas left to the HPA when autoscaling")
        pod_checks(case, values, merged, pod, fullname, parsed)
        # What the image test runs the image with: the container as the kubelet starts it.
        container = next((c for c in pod["spec"]["containers"] if c["name"] == SIDECAR), {})
        volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
        pod_spec = {
            "command": container.get("command"),
            "args": container.get("args"),
            "mounts": {
                m["mountPath"]: (volumes.get(m["name"], {}).get("secret") or volumes.get(m["name"], {}).get("configMap") or {}).get("defaultMode", 0o644)
                for m in container.get("volumeMounts", [])
            },
            "run_as_user": container.get("securityContext", {}).get("runAsUser"),
            "fs_group": pod["spec"].get("securityContext", {}).get("fsGroup"),
        }
        sidecar_ports = {p["name"] for c in pod["spec"]["containers"] if c["name"] == SIDECAR for p in c["ports"]}
        # The Service reaches the sidecar's MCP port and nothing else.
        services = [s for s in kinds.get("Service", []) if s["metadata"]["name"] == fullname]
        if check(len(services) == 1, f"{case}: the client Service"):
            service = services[0]
            check(service["spec"]["type"] == merged["service"]["type"], f"{case}: Service type")
            targets = [p["targetPort"] for p in service["spec"]["ports"]]
            check(targets == ["mcp"] and "mcp" in sidecar_ports, f"{case}: the Service targets only the sidecar's port: {targets}")
            check(service["spec"]["selector"] == selector, f"{case}: the Service selects the pods")
    # NetworkPolicy: only the sidecar's port, and the admin port from monitoring.
    policies = kinds.get("NetworkPolicy", [])
    if merged["networkPolicy"]["enabled"]:
        if check(len(policies) == 1, f"{case}: a NetworkPolicy"):
            spec = policies[0]["spec"]
            check(spec["policyTypes"] == ["Ingress"], f"{case}: NetworkPolicy governs ingress")
            ports = sorted(p["port"] for rule in spec["ingress"] for p in rule["ports"])
            check(ports == ["admin", "mcp"], f"{case}: NetworkPolicy admits only the sidecar's ports: {ports}")
            admin = [rule for rule in spec["ingress"] if rule["ports"][0]["port"] == "admin"][0]
            namespace = merged["networkPolicy"]["monitoringNamespace"]
            check({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}} in admin.get("from", []), f"{case}: admin port from the {namespace} namespace")
            check(len(admin["from"]) == 1 + len(merged["networkPolicy"]["adminFrom"]), f"{case}: admin peers")
            mcp = [rule for rule in spec["ingress"] if rule["ports"][0]["port"] == "mcp"][0]
            check(mcp.get("from", []) == merged["networkPolicy"]["proxyFrom"], f"{case}: MCP peers")
    else:
        check(not policies, f"{case}: no NetworkPolicy when disabled")
    # The generated keys: the `mcp-state-guard keygen` format.
    secrets = kinds.get("Secret", [])
    keys_text = None
    if merged["keys"]["existingSecret"]:
        check(not secrets, f"{case}: no keys Secret with keys.existingSecret")
    elif check(len(secrets) == 1, f"{case}: the keys Secret"):
        secret = secrets[0]
        keys_text = base64.b64decode(secret["data"][merged["keys"]["secretKey"]]).decode()
        check(re.fullmatch(r"[0-9a-f]{64}\n", keys_text) is not None, f"{case}: a generated key in keygen format")
        check(secret["metadata"].get("annotations", {}).get("helm.sh/resource-policy") == "keep", f"{case}: the keys survive an uninstall")
    # Optional objects, each present exactly when enabled.
    expected = {
        "PodDisruptionBudget": merged["podDisruptionBudget"]["enabled"],
        "HorizontalPodAutoscaler": merged["autoscaling"]["enabled"],
        "ServiceMonitor": merged["serviceMonitor"]["enabled"],
        "PodMonitor": merged["podMonitor"]["enabled"],
        "PrometheusRule": merged["prometheusRule"]["enabled"],
        "Certificate": merged["tls"]["enabled"] and merged["tls"]["certManager"]["enabled"],
    }
    for kind, wanted in expected.items():
        check(len(kinds.get(kind, [])) == (1 if wanted else 0), f"{case}: {kind} present exactly when enabled")
    for kind in ["ServiceMonitor", "PodMonitor"]:
        for monitor in kinds.get(kind, []):
            endpoints = monitor["spec"].get("endpoints") or monitor["spec"].get("podMetricsEndpoints")
            check(endpoints == [{"port": "admin", "path": "/metrics", "interval": "30s", "scrapeTimeout": "10s"}], f"{case}: {kind} scrapes the admin port")
            check(monitor["metadata"]["labels"].get("release") == values[kind[0].lower() + kind[1:]].get("labels", {}).get("release"), f"{case}: {kind} labels")
    for monitor in kinds.get("ServiceMonitor", []):
        metrics = [s for s in kinds["Service"] if s["metadata"]["name"] == f"{fullname}-metrics"]
        if check(len(metrics) == 1, f"{case}: the metrics Service"):
            check(all(metrics[0]["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items()), f"{case}: the ServiceMonitor selects the metrics Service")
            check(monitor["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/component") == "metrics", f"{case}: the ServiceMonitor selects only the metrics Service")
    for cert in kinds.get("Certificate", []):
        check(cert["spec"]["secretName"] == f"{fullname}-tls" and cert["spec"]["dnsNames"] == merged["tls"]["certManager"]["dnsNames"], f"{case}: Certificate spec")
        check(cert["apiVersion"] == "cert-manager.io/v1" and cert["spec"]["issuerRef"]["kind"] == "ClusterIssuer", f"{case}: Certificate issuer")
    for hpa in kinds.get("HorizontalPodAutoscaler", []):
        check(hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": fullname}, f"{case}: the HPA scales the Deployment")
    dashboards = [m for m in kinds.get("ConfigMap", []) if m["metadata"]["name"].endswith("-dashboard")]
    check(len(dashboards) == (1 if merged["grafanaDashboard"]["enabled"] else 0), f"{case}: dashboard ConfigMap exactly when enabled")
    for dashboard in dashboards:
        check(dashboard["metadata"]["labels"].get("grafana_dashboard") == "1", f"{case}: the dashboard carries the Grafana sidecar's label")
    return {"kinds": sorted(kinds), "config": config["text"], "pod": pod_spec, "keys": keys_text, "fullname": fullname, "rules": [r["spec"] for r in kinds.get("PrometheusRule", [])], "dashboards": [d["data"] for d in dashboards]}


def lint(case: str, values: dict) -> None:
    for version in KUBE_VERSIONS:
        report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE, kube_version=f"v{version}")
        check(report.get("total_charts_linted") == 1, f"{case}: lint ran: {report}")
        for message in report.get("messages", []):
            if message.get("severity", 0) >= 2:
                failures.append(f"{case}: lint (Kubernetes {version}): {message}")
        for error in report.get("errors", []) or []:
            failures.append(f"{case}: lint (Kubernetes {version}): {error}")


def reroot(text: str, root: Path) -> str:
    """The rendered config with the pod's mount points under `root`, for check-config."""
    return text.replace('"/etc/mcp-state-guard/', f'"{root}/etc/mcp-state-guard/')


def command_render(request: dict) -> dict:
    out = Path(request["out"])
    chart = helm.Chart.load(str(CHART))
    answer: dict = {"cases": {}, "validated": 0}
    unvalidated: set[str] = set()
    for case in CASES:
        values = values_of(case)
        chart.validate_schema(values)
        merged = chart.merge_values(values)
        objects = documents(render(chart, values))
        lint(case, values)
        count, missing = validate(case, objects)
        answer["validated"] += count
        unvalidated |= missing
        result = case_checks(case, values, merged, objects)
        root = out / case
        (root / "etc/mcp-state-guard/config").mkdir(parents=True, exist_ok=True)
        config_path = root / "etc/mcp-state-guard/config/mcp-state-guard.toml"
        config_path.write_text(reroot(result["config"], root))
        keys_key = merged["keys"]["secretKey"]
        (root / "etc/mcp-state-guard/keys").mkdir(parents=True, exist_ok=True)
        # keys.existingSecret: the operator's Secret, in the format the chart generates.
        keys_path = root / "etc/mcp-state-guard/keys" / keys_key
        keys_path.write_text(result["keys"] or ("0123456789abcdef" * 4 + "\n"))
        env = {}
        if merged["singleUse"]["redis"]["existingSecret"]:
            env["MCP_STATE_GUARD_SINGLE_USE__REDIS_URL"] = "redis://:secret@redis.example:6379/0"
        rules = []
        for i, spec in enumerate(result["rules"]):
            path = root / f"rules-{i}.yml"
            path.write_text(yaml.safe_dump(spec, sort_keys=False))
            rules.append(str(path))
        dashboards = []
        for i, data in enumerate(result["dashboards"]):
            path = root / f"dashboard-{i}.json"
            path.write_text(data["mcp-state-guard.json"])
            dashboards.append(str(path))
        answer["cases"][case] = {
            "kinds": result["kinds"],
            "root": str(root),
            "config": str(config_path),
            "pod": result["pod"],
            "env": env,
            "tls": merged["tls"]["enabled"],
            "client_ca": merged["tls"]["enabled"] and merged["tls"]["clientCA"],
            "jwks_file": merged["jwt"]["enabled"] and not merged["jwt"]["jwksUrl"],
            "rules": rules,
            "dashboards": dashboards,
        }
    answer["unvalidated_kinds"] = sorted(unvalidated)
    check(unvalidated <= CRD_KINDS, f"kinds without a Kubernetes schema beyond the custom resources: {sorted(unvalidated - CRD_KINDS)}")
    answer["checksum"] = checksum_checks(chart)
    answer["alerts_equal_shipped"] = yaml.safe_load((CHART / "files/alerts.yml").read_text()) == yaml.safe_load((ROOT / "config/alerts.yml").read_text())
    answer["kube_versions"] = KUBE_VERSIONS
    answer["schema_keys"] = schema_covers_every_config_key(chart)
    return answer


# Keys of the sidecar's configuration that the chart sets itself (not in the schema).
CHART_OWNED = {"listen", "admin_listen", "state.keys_file", "tls.cert_file", "tls.key_file", "tls.client_ca_file"}


def schema_covers_every_config_key(chart: helm.Chart) -> int:
    """values.schema.json's `config` names exactly the keys config/mcp-state-guard.toml
    documents (set or commented out), so the schema cannot drift from the sidecar."""
    source = (ROOT / "config/mcp-state-guard.toml").read_text()
    documented = set()
    table = ""
    for line in source.splitlines():
        if m := re.fullmatch(r"\[([a-z_.]+)\]", line):
            table = m.group(1) + "."
        elif m := re.fullmatch(r"(?:# )?([a-z0-9_]+) = .*", line):
            documented.add(table + m.group(1))

    def keys(schema: dict, prefix: str = "") -> set[str]:
        out = set()
        for key, sub in schema.get("properties", {}).items():
            if sub.get("type") == "object":
                out |= keys(sub, f"{prefix}{key}.")
            else:
                out.add(prefix + key)
        return out

    in_schema = keys(chart.schema["properties"]["config"])
    check(in_schema | CHART_OWNED == documented, f"values.schema.json config vs config/mcp-state-guard.toml: only in the schema {sorted(in_schema - documented)}, only in the file {sorted(documented - in_schema - CHART_OWNED)}")
    return len(in_schema)


def checksum_checks(chart: helm.Chart) -> dict:
    """The restart checksum moves for settings that need a restart, not for the
    single-use lists the sidecar re-reads from the mounted file."""

    def checksum(extra: dict) -> str:
        objects = documents(render(chart, merge({"server": SERVER}, extra)))
        deployment = [o for o in objects if o["kind"] == "Deployment"][0]
        return deployment["spec"]["template"]["metadata"]["annotations"]["checksum/mcp-state-guard-restart"]

    base = checksum({})
    hot = {
        "singleUse.tools": checksum({"singleUse": {"tools": ["pay"]}}),
        "config.single_use.prompts": checksum({"config": {"single_use": {"prompts": ["confirm"]}}}),
        "config.single_use.default": checksum({"config": {"single_use": {"default": True}}}),
    }
    cold = {
        "config.limits.max_connections": checksum({"config": {"limits": {"max_connections": 64}}}),
        "config.single_use.store": checksum({"config": {"single_use": {"store": "redis", "redis_url": "redis://r:6379"}}}),
        "config.state.ttl_seconds": checksum({"config": {"state": {"ttl_seconds": 60}}}),
        "tls.enabled": checksum({"tls": {"enabled": True, "existingSecret": "t"}}),
    }
    for name, value in hot.items():
        check(value == base, f"checksum: changing {name} (applied without a restart) rolls the pods")
    for name, value in cold.items():
        check(value != base, f"checksum: changing {name} (needs a restart) does not roll the pods")
    return {"hot": sorted(hot), "cold": sorted(cold)}


# Invalid values and the words the schema's error must contain.
INVALID: dict[str, tuple[dict, list[str]]] = {
    "server image missing": ({}, ["server", "image"]),
    "config value of the wrong type": (
        {"server": SERVER, "config": {"state": {"ttl_seconds": "ten minutes"}}},
        ["ttl_seconds", "integer"],
    ),
    "unknown config key": ({"server": SERVER, "config": {"single_use": {"tool": ["pay"]}}}, ["tool"]),
    "chart-owned config key": ({"server": SERVER, "config": {"listen": "127.0.0.1:1"}}, ["listen"]),
    "unknown principal source": ({"server": SERVER, "config": {"principal": {"source": "cookie"}}}, ["source", "must be one of"]),
    "port out of range": ({"server": SERVER, "ports": {"proxy": 70000, "admin": 9090}}, ["proxy", "maximum"]),
    "jwt without issuer": ({"server": SERVER, "jwt": {"enabled": True, "audience": "a", "jwksUrl": "https://i/j"}}, ["issuer"]),
    "cert-manager without issuer": (
        {"server": SERVER, "tls": {"enabled": True, "certManager": {"enabled": True, "dnsNames": ["a.example"]}}},
        ["name"],
    ),
    "handle without a pointer": (
        {"server": SERVER, "config": {"handles": [{"kind": "import", "issued_by": ["a"], "accepted_by": ["b"], "argument_pointer": "/x"}]}},
        ["result_pointer"],
    ),
    "image digest malformed": ({"server": SERVER, "image": {"digest": "latest"}}, ["digest"]),
    "unknown top-level value": ({"server": SERVER, "replicas": 3}, ["replicas"]),
}


def command_schema(_request: dict) -> dict:
    chart = helm.Chart.load(str(CHART))
    answer = {"cases": {}}
    for name, (values, words) in INVALID.items():
        try:
            chart.validate_schema(values)
            error = None
        except helm.HelmValuesError as e:
            error = str(e)
        answer["cases"][name] = error
        if check(error is not None, f"schema accepted: {name}"):
            for word in words:
                check(word in error, f"schema error for {name} does not name {word!r}: {error}")
        # The install path refuses it the same way (render validates before templates run).
        try:
            render(chart, values)
            failures.append(f"render accepted: {name}")
        except helm.HelmError:
            pass
    # A grace period shorter than the preStop delay + drain is refused by the template.
    try:
        render(chart, {"server": SERVER, "terminationGracePeriodSeconds": 30})
        failures.append("render accepted a grace period shorter than preStop + drain")
    except helm.HelmError as e:
        answer["cases"]["grace period too short"] = str(e)
        check("terminationGracePeriodSeconds" in str(e), f"grace period error: {e}")
    return answer


# Values that break naive renderers: integers Helm reads as floats, large integers, an
# array of tables, nested tables, strings with quotes, backslashes, newlines and
# non-ASCII, keys that need quoting, booleans, empty arrays and tables.
TOML_CASE = {
    "config": {
        "state": {"audience": 'https://mcp.example.com/"quoted"\\back\nline\ttab é', "ttl_seconds": 300},
        "limits": {"max_buffered_bytes": 17179869184, "max_body_bytes": 4194304},
        "idempotency": {"ttl_seconds": 2592000, "max_result_bytes": 67108864, "strip_key": True, "tools": []},
        "single_use": {"default": False, "tools": ["approve_*", "pay"]},
        "passthrough_paths": ["/oauth/token", "/health"],
        "handles": [
            {"kind": "import", "issued_by": ["start"], "result_pointer": "/structuredContent/id", "accepted_by": ["append", "commit"], "argument_pointer": "/id", "ttl_seconds": 3600},
            {"kind": "draft", "issued_by": ["draft"], "result_pointer": "/structuredContent/d~1x", "accepted_by": ["publish"], "argument_pointer": "/d"},
        ],
        "principal": {"source": "header", "trusted_proxies": ["10.0.0.0/8"], "mtls": {"identity": "subject"}},
    }
}


def command_toml(_request: dict) -> dict:
    chart = helm.Chart.load(str(CHART))
    values = merge({"server": SERVER}, TOML_CASE)
    objects = documents(render(chart, values))
    text = [o for o in objects if o["kind"] == "ConfigMap"][0]["data"]["mcp-state-guard.toml"]
    parsed = tomllib.loads(text)
    want = copy.deepcopy(TOML_CASE["config"])
    # What the chart adds or owns.
    for key in ["listen", "admin_listen", "upstream"]:
        want[key] = parsed.get(key)
    want["state"]["keys_file"] = "/etc/mcp-state-guard/keys/keys"
    check(parsed == want, f"TOML round trip differs:\nwant {want}\ngot  {parsed}\n{text}")
    integers_stay_integers("toml", parsed)
    check(parsed["limits"]["max_buffered_bytes"] == 17179869184, "an integer beyond 2^32 stays an integer")
    check("[[handles]]" in text, "handles rendered as an array of tables")
    # The keys of a nested table and of an array of tables land in their own table.
    check(text.index("[principal.mtls]") > text.index("[principal]"), "nested table after its parent")
    # `--set` values, parsed by Helm's own strvals parser. (Helm holds every number of a
    # values file as a float64, so integers beyond 2^53 cannot pass through exactly; no
    # setting of the sidecar comes near.)
    set_values = helm.parse_set_string("config.limits.max_connections=4096,config.limits.max_buffered_bytes=4503599627370496")
    objects = documents(render(chart, merge({"server": SERVER}, set_values)))
    parsed = tomllib.loads([o for o in objects if o["kind"] == "ConfigMap"][0]["data"]["mcp-state-guard.toml"])
    check(parsed["limits"]["max_connections"] == 4096, f"--set integer kept: {parsed['limits']}")
    check(parsed["limits"]["max_buffered_bytes"] == 2**52, f"--set integer of 2^52 kept exactly: {parsed['limits']}")
    return {"toml": text}


class FakeApiServer:
    """Just enough of the Kubernetes API for Helm's `lookup` of one Secret."""

    def __init__(self, secret: dict | None):
        self.secret = secret
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                outer.requests.append(self.path)
                path = self.path.split("?")[0]
                name = f"/api/v1/namespaces/{NAMESPACE}/secrets/"
                if path.startswith(name):
                    wanted = path[len(name):]
                    if outer.secret and outer.secret["metadata"]["name"] == wanted:
                        self.reply(200, outer.secret)
                    else:
                        self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
                elif path == "/api/v1":
                    self.reply(200, {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                        {"name": "secrets", "singularName": "secret", "namespaced": True, "kind": "Secret", "verbs": ["get", "list"]}]})
                elif path == "/api":
                    self.reply(200, {"kind": "APIVersions", "versions": ["v1"]})
                elif path == "/version":
                    self.reply(200, {"major": "1", "minor": "37", "gitVersion": "v1.37.0"})
                else:
                    self.reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})

            def reply(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def kubeconfig(self) -> str:
        port = self.server.server_address[1]
        return (
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: fake, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
            "users: [{name: fake, user: {token: fake}}]\n"
            f"contexts: [{{name: fake, context: {{cluster: fake, user: fake, namespace: {NAMESPACE}}}}}]\n"
            "current-context: fake\n"
        )

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def rendered_keys(objects: list[dict]) -> str:
    secret = [o for o in objects if o["kind"] == "Secret"][0]
    return base64.b64decode(secret["data"]["keys"]).decode()


def command_lookup(_request: dict) -> dict:
    chart = helm.Chart.load(str(CHART))
    values = {"server": SERVER}
    name = f"{RELEASE}-mcp-state-guard-keys"
    # First install: nothing to find, a new key.
    api = FakeApiServer(None)
    config = helm.Config(kubeconfig_content=api.kubeconfig(), namespace=NAMESPACE)
    first = rendered_keys(documents(config.render(chart, values, name=RELEASE, namespace=NAMESPACE, is_install=True)))
    looked_up = any(name in r for r in api.requests)
    config.close()
    api.close()
    check(looked_up, f"the install looked the keys Secret up: {api.requests}")
    check(re.fullmatch(r"[0-9a-f]{64}\n", first) is not None, "a new key on install")
    # Upgrade: the Secret exists, mid-rotation (two keys): kept byte for byte.
    rotated = first + "fedcba9876543210" * 4 + "\n"
    secret = {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
              "metadata": {"name": name, "namespace": NAMESPACE},
              "data": {"keys": base64.b64encode(rotated.encode()).decode()}}
    api = FakeApiServer(secret)
    config = helm.Config(kubeconfig_content=api.kubeconfig(), namespace=NAMESPACE)
    upgraded = [rendered_keys(documents(config.render(chart, values, name=RELEASE, namespace=NAMESPACE, is_upgrade=True, revision=n))) for n in (2, 3)]
    config.close()
    api.close()
    check(upgraded == [rotated, rotated], "upgrades keep the Secret's keys")
    # Offline (helm template): nothing to look up, a fresh key each time.
    offline = [rendered_keys(documents(render(chart, values))) for _ in range(2)]
    check(offline[0] != offline[1], "two offline renders generate two different keys")
    return {"install": len(first), "upgrade_kept": upgraded[0] == rotated}


PARENT_DEPLOYMENT = """apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-legacy
spec:
  replicas: 1
  selector:
    matchLabels: {app: legacy}
  template:
    metadata:
      labels: {app: legacy}
      annotations:
        {{- include "mcp-state-guard.sidecar.podAnnotations" (index .Subcharts "mcp-state-guard") | nindent 8 }}
    spec:
      securityContext:
        runAsNonRoot: true
        fsGroup: 65532
        seccompProfile: {type: RuntimeDefault}
      terminationGracePeriodSeconds: 60
      containers:
        - name: legacy
          image: example.com/legacy-mcp:1.4.2
          args: ["--host", "127.0.0.1", "--port", "3000"]
        {{- include "mcp-state-guard.sidecar.container" (index .Subcharts "mcp-state-guard") | nindent 8 }}
      volumes:
        - name: scratch
          emptyDir: {}
        {{- include "mcp-state-guard.sidecar.volumes" (index .Subcharts "mcp-state-guard") | nindent 8 }}
"""


def command_parent(request: dict) -> dict:
    out = Path(request["out"])
    parent = out / "legacy-app"
    shutil.rmtree(parent, ignore_errors=True)
    (parent / "templates").mkdir(parents=True)
    (parent / "charts").mkdir()
    (parent / "Chart.yaml").write_text(
        "apiVersion: v2\nname: legacy-app\nversion: 1.0.0\ndependencies:\n"
        "  - name: mcp-state-guard\n    version: 0.1.0\n"
    )
    (parent / "values.yaml").write_text(
        "mcp-state-guard:\n  workload:\n    enabled: false\n  server:\n    image:\n      repository: example.com/legacy-mcp\n"
        "  singleUse:\n    tools: [pay]\n"
    )
    (parent / "templates/deployment.yaml").write_text(PARENT_DEPLOYMENT)
    shutil.copytree(CHART, parent / "charts/mcp-state-guard")
    chart = helm.Chart.load(str(parent))
    objects = documents(chart.render(values={}, name="shop", namespace=NAMESPACE, is_install=True))
    kinds = by_kind(objects)
    deployments = kinds.get("Deployment", [])
    answer = {"kinds": sorted(kinds)}
    if check(len(deployments) == 1, f"only the parent's Deployment: {[d['metadata']['name'] for d in deployments]}"):
        pod = deployments[0]["spec"]["template"]
        names = [c["name"] for c in pod["spec"]["containers"]]
        check(names == ["legacy", SIDECAR], f"the parent's containers plus the sidecar: {names}")
        volumes = [v["name"] for v in pod["spec"]["volumes"]]
        check(volumes == ["scratch", "mcp-state-guard-config", "mcp-state-guard-keys"], f"the sidecar's volumes: {volumes}")
        check("checksum/mcp-state-guard-restart" in pod["metadata"]["annotations"], "the restart checksum on the parent's pods")
        secret = pod["spec"]["volumes"][2]["secret"]["secretName"]
        config_map = pod["spec"]["volumes"][1]["configMap"]["name"]
        check([s["metadata"]["name"] for s in kinds.get("Secret", [])] == [secret], f"the keys Secret {secret} is rendered")
        maps = [m for m in kinds.get("ConfigMap", []) if m["metadata"]["name"] == config_map]
        if check(len(maps) == 1, f"the config ConfigMap {config_map} is rendered"):
            parsed = tomllib.loads(maps[0]["data"]["mcp-state-guard.toml"])
            check(parsed["single_use"]["tools"] == ["pay"], "the subchart's values reach the config")
    for kind in ["Service", "NetworkPolicy", "ServiceAccount"]:
        check(kind not in kinds, f"no {kind} from the subchart with workload.enabled=false")
    count, missing = validate("parent", objects)
    check(not missing, f"parent objects without a schema: {missing}")
    answer["validated"] = count
    return answer


def main() -> None:
    request = json.load(sys.stdin)
    helm.disable_logging()
    commands = {"render": command_render, "schema": command_schema, "toml": command_toml, "lookup": command_lookup, "parent": command_parent}
    answer = commands[request["command"]](request)
    answer["failures"] = failures
    json.dump(answer, sys.stdout)


if __name__ == "__main__":
    main()
