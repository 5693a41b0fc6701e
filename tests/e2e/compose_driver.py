"""Runs the topology of `deploy/compose.yaml` with the docker SDK (the `docker compose` plugin
cannot be installed here: see docs/decisions/ "compose without the compose plugin").

It reads the compose file itself and honours the subset the file uses: `${VAR:-default}`
interpolation, YAML anchors and merge keys, image, command/entrypoint, environment,
healthcheck, depends_on with condition service_healthy, ports (published on the host
address given; host port 0 = any), named volumes and bind mounts, security_opt, restart and
working_dir; every service joins one network under its service name. Anything else in a
service is refused, so the file cannot drift from what this driver runs.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import docker
import yaml
from docker.models.containers import Container

SUPPORTED = {
    "image",
    "command",
    "entrypoint",
    "environment",
    "healthcheck",
    "depends_on",
    "ports",
    "volumes",
    "security_opt",
    "restart",
    "working_dir",
}
_VAR = re.compile(r"\$\{(\w+)(?::-([^}]*))?\}")
_UNITS = {"ms": 1e6, "s": 1e9, "m": 60e9}


def interpolate(value: Any, env: Mapping[str, str]) -> Any:
    """Replace ${VAR} and ${VAR:-default} in every string of value (empty counts as unset)."""
    if isinstance(value, str):
        return _VAR.sub(lambda m: env.get(m.group(1)) or (m.group(2) or ""), value)
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    return value


def _nanos(text: str) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m)", text)
    if not match:
        raise ValueError(f"duration {text!r} is not N(ms|s|m)")
    return int(float(match.group(1)) * _UNITS[match.group(2)])


class ComposeProject:
    """The services of a compose file as containers on one docker network."""

    def __init__(
        self,
        compose_file: Path,
        env: Mapping[str, str],
        extra: Mapping[str, dict[str, Any]] | None = None,
    ) -> None:
        raw = yaml.safe_load(compose_file.read_text())
        self.definitions: dict[str, dict[str, Any]] = {
            **interpolate(raw["services"], env),
            **dict(extra or {}),
        }
        for name, spec in self.definitions.items():
            unknown = set(spec) - SUPPORTED
            if unknown:
                raise ValueError(f"service {name}: compose keys this driver does not run: {sorted(unknown)}")
        self.volume_names = list((raw.get("volumes") or {}).keys())
        self.name = f"agentrt-test-{uuid.uuid4().hex[:8]}"
        self.client = docker.from_env()
        self.network = self.client.networks.create(f"{self.name}_default", driver="bridge")
        self.containers: dict[str, Container] = {}

    def _create(self, service: str) -> Container:
        spec = self.definitions[service]
        ports: dict[str, Any] = {}
        for entry in spec.get("ports", []):
            host, host_port, container_port = str(entry).rsplit(":", 2)
            ports[f"{container_port}/tcp"] = (host, None if host_port in ("", "0") else int(host_port))
        volumes: dict[str, dict[str, str]] = {}
        for entry in spec.get("volumes", []):
            source, target, *mode = entry.split(":")
            if source in self.volume_names:
                source = f"{self.name}_{source}"
            volumes[source] = {"bind": target, "mode": mode[0] if mode else "rw"}
        health = spec.get("healthcheck")
        healthcheck = None
        if health and health.get("test") == ["NONE"]:
            healthcheck = {"test": ["NONE"]}  # the image's HEALTHCHECK off, as compose does
        elif health:
            healthcheck = {
                "test": health["test"],
                "interval": _nanos(health.get("interval", "30s")),
                "timeout": _nanos(health.get("timeout", "30s")),
                "retries": int(health.get("retries", 3)),
                "start_period": _nanos(health.get("start_period", "0s")),
            }
        api = self.client.api
        options = list(spec.get("security_opt") or [])
        # `systempaths=unconfined` is the docker CLI's (and compose's) word for no masked or
        # read-only /proc paths; the engine's API takes the two lists.
        unmasked = "systempaths=unconfined" in options
        options = [o for o in options if o != "systempaths=unconfined"]
        host_config = api.create_host_config(
            port_bindings=ports,
            binds=volumes,
            security_opt=options or None,
            restart_policy={"Name": spec["restart"]} if spec.get("restart") else None,
            network_mode=self.network.name,
        )
        if unmasked:
            host_config["MaskedPaths"] = []
            host_config["ReadonlyPaths"] = []
        created = api.create_container(
            spec["image"],
            command=spec.get("command"),
            entrypoint=spec.get("entrypoint"),
            name=f"{self.name}-{service}",
            environment={k: str(v) for k, v in (spec.get("environment") or {}).items()},
            healthcheck=healthcheck,
            ports=[int(p.split("/")[0]) for p in ports],
            working_dir=spec.get("working_dir"),
            host_config=host_config,
            networking_config=api.create_networking_config(
                {self.network.name: api.create_endpoint_config(aliases=[service])}
            ),
            labels={"agentrt.test": self.name},
        )
        return self.client.containers.get(created["Id"])

    def _order(self) -> list[str]:
        done: list[str] = []

        def visit(service: str, path: tuple[str, ...]) -> None:
            if service in done:
                return
            if service in path:
                raise ValueError(f"depends_on cycle through {service}")
            for dependency in self.definitions[service].get("depends_on") or {}:
                visit(dependency, (*path, service))
            done.append(service)

        for service in self.definitions:
            visit(service, ())
        return done

    def up(self, timeout: float) -> None:
        """Start every service after its dependencies are healthy (condition service_healthy)."""
        for service in self._order():
            for dependency, rule in (self.definitions[service].get("depends_on") or {}).items():
                if (rule or {}).get("condition") == "service_healthy":
                    self.wait_healthy(dependency, timeout)
            self.containers[service] = self._create(service)
            self.containers[service].start()

    def status(self, service: str) -> tuple[str, str]:
        """Return (container state, health status or "")."""
        container = self.containers[service]
        container.reload()
        state = container.attrs["State"]
        return state["Status"], (state.get("Health") or {}).get("Status", "")

    def wait_healthy(self, service: str, timeout: float) -> None:
        """Wait until the service's container reports healthy; fail with its log tail."""
        deadline = time.monotonic() + timeout
        while True:
            state, health = self.status(service)
            if health == "healthy" or (
                not self.definitions[service].get("healthcheck") and state == "running"
            ):
                return
            if state in ("exited", "dead") or time.monotonic() > deadline:
                raise AssertionError(f"{service} is {state}/{health or '-'}:\n{self.logs(service)}")
            time.sleep(0.2)

    def published(self, service: str, port: int) -> str:
        """Return "host:port" where the service's container port is published."""
        container = self.containers[service]
        container.reload()
        (binding,) = container.attrs["NetworkSettings"]["Ports"][f"{port}/tcp"]
        return f"{binding['HostIp']}:{binding['HostPort']}"

    def logs(self, service: str, lines: int = 40) -> str:
        return self.containers[service].logs(tail=lines).decode(errors="replace")

    def down(self) -> None:
        """Remove the containers, the network and the project's volumes."""
        for container in self.containers.values():
            try:
                container.remove(force=True, v=True)
            except docker.errors.NotFound:
                pass
        try:
            self.network.remove()
        except docker.errors.APIError:
            pass
        for volume in self.volume_names:
            try:
                self.client.volumes.get(f"{self.name}_{volume}").remove(force=True)
            except docker.errors.NotFound:
                pass
        self.client.close()


def docker_ready() -> bool:
    """True when a docker engine answers (DOCKER_HOST or the default socket)."""
    try:
        client = docker.from_env()
        client.ping()
        client.close()
    except Exception:  # noqa: BLE001 - any failure means no engine to use
        return False
    return True


__all__ = ["ComposeProject", "docker_ready", "interpolate"]
