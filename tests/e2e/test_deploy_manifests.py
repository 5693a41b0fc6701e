"""The Kubernetes overlays render (kubectl kustomize) into what the mesh needs to scale and
drain: per service a Deployment with native gRPC probes on the plaintext health port, a drain
that fits in the termination grace, a headless Service, an HPA and a PodDisruptionBudget;
Secrets for the tokens and database URLs; TLS files in prod. The schema check itself is
`make deploy-check` (kubernetes-validate), which this test also runs."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from agentrt.cli.serve import SERVICES
from agentrt.mesh.config import DEFAULT_PORTS
from tests.needs import unavailable

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ("dev", "prod")


def _render(overlay: str) -> list[dict]:
    if not shutil.which("kubectl"):
        unavailable("kubectl is not installed (kubectl kustomize renders the overlays)")
    out = subprocess.run(
        ["kubectl", "kustomize", str(ROOT / "deploy/k8s/overlays" / overlay)],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def _by(docs: list[dict], kind: str) -> dict[str, dict]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def _env(container: dict, config: dict) -> dict[str, object]:
    values: dict[str, object] = dict(config["data"])
    for item in container.get("env", []):
        values[item["name"]] = item.get("value", item.get("valueFrom"))
    return values


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_scales_probes_and_drains(overlay):
    docs = _render(overlay)
    deployments, services = _by(docs, "Deployment"), _by(docs, "Service")
    hpas, pdbs = _by(docs, "HorizontalPodAutoscaler"), _by(docs, "PodDisruptionBudget")
    (config,) = [
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("agentrt-config")
    ]
    for svc in SERVICES:
        name = f"agentrt-{svc}"
        deployment = deployments[name]
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["args"] == ["serve", svc]
        env = _env(container, config)
        health_port = int(env["AGENTRT_HEALTH_PORT"])
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert container[probe]["grpc"]["port"] == health_port, (svc, probe)
        assert container["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
        pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
        drain = float(env["AGENTRT_DRAIN_SECONDS"])
        assert pod["terminationGracePeriodSeconds"] >= pre_stop + drain + 5, svc
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert env["AGENTRT_AUTH_TOKEN"]["secretKeyRef"]["name"].startswith("agentrt-auth")
        ports = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert ports["grpc"] == DEFAULT_PORTS[svc]
        # every service serves /metrics on the port its Deployment and Service declare
        assert int(env[f"AGENTRT_{svc.upper()}_METRICS_PORT"]) == ports["metrics"], svc
        service = services[name]
        service_ports = {p["name"]: p for p in service["spec"]["ports"]}
        assert service_ports["metrics"]["targetPort"] == "metrics", svc
        assert service["spec"]["clusterIP"] == "None"  # headless: channels balance over the pods
        assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        assert hpas[name]["spec"]["scaleTargetRef"]["name"] == name
        assert pdbs[name]["spec"]["selector"] == deployment["spec"]["selector"]
        # Peers are reached by the headless names.
        assert env[f"AGENTRT_{svc.upper()}_ADDR"] == f"{name}:{DEFAULT_PORTS[svc]}"
        if svc in ("runs", "sessions", "tools", "tasks"):
            assert env[f"AGENTRT_{svc.upper()}_DB"]["secretKeyRef"]["name"].startswith("agentrt-db")


def test_prod_serves_mtls_from_the_tls_secret():
    docs = _render("prod")
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert config["data"]["AGENTRT_TLS_CLIENT_AUTH"] == "true"
    for deployment in _by(docs, "Deployment").values():
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["tls"]["secret"]["secretName"] == "agentrt-tls"
        mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert config["data"]["AGENTRT_TLS_CERT_FILE"].startswith(mounts["tls"] + "/")


def test_dev_bundles_postgres_and_generates_its_secrets():
    docs = _render("dev")
    assert "agentrt-postgres" in _by(docs, "Deployment")
    secrets = {name.rsplit("-", 1)[0] for name in _by(docs, "Secret")}
    assert {"agentrt-auth", "agentrt-tokens", "agentrt-db"} <= secrets
    assert all(d["spec"]["replicas"] == 1 for d in _by(docs, "Deployment").values())


def test_the_image_opens_the_health_port_the_probes_use():
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    docs = _render("prod")
    (config,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert f"AGENTRT_HEALTH_PORT={config['data']['AGENTRT_HEALTH_PORT']}" in dockerfile


def test_deploy_check_validates_every_overlay_against_the_schemas():
    if not shutil.which("kubectl"):
        unavailable("kubectl is not installed")
    done = subprocess.run(["scripts/deploy-check.sh"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    for overlay in OVERLAYS:
        assert f"deploy-check: {overlay}:" in done.stdout
