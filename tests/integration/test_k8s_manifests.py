"""``docker/k8s``: every manifest validates against the Kubernetes API schemas, and the
pieces fit together and fit memmachine.

Schemas: kubernetes-validate (a dev dependency) ships the JSON schemas of each Kubernetes
release inside the package, so the check runs offline; strict mode refuses unknown fields
(a misspelt ``readinesProbe`` fails). The manifests are checked against the oldest and the
newest release the package knows, within the range this project supports.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes_validate
import pytest
import yaml

from memmachine.bootstrap import NEO4J_SCHEMES, REDIS_SCHEMES
from memmachine.config import Settings
from tests.conftest import REPO_ROOT
from tests.integration.test_docker_files import settings_variables

K8S = REPO_ROOT / "docker" / "k8s"
#: Kubernetes releases the manifests must validate against (oldest supported, newest known).
VERSIONS = ["1.29.0", kubernetes_validate.latest_version()]


def manifests() -> list[Path]:
    return sorted(path for path in K8S.rglob("*.yaml") if path.name != "kustomization.yaml")


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def resources() -> dict[tuple[str, str], dict[str, Any]]:
    """``{(kind, name): resource}`` of the kustomization (the optional files left out)."""
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for doc in documents(K8S / name):
            found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", manifests(), ids=lambda path: str(path.relative_to(K8S)))
def test_every_manifest_validates_against_the_kubernetes_schemas(path: Path, version: str) -> None:
    docs = documents(path)
    assert docs, path
    for doc in docs:
        kubernetes_validate.validate(doc, version, strict=True)


def test_a_misspelt_field_fails_validation() -> None:
    """The check is strict: what the schema does not know is an error, not ignored."""
    api = resources()[("Deployment", "memmachine-api")]
    container(api)["readinesProbe"] = container(api).pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError, match="readinesProbe"):
        kubernetes_validate.validate(api, VERSIONS[-1], strict=True)


def test_the_kustomization_lists_every_manifest_but_the_optional_ones() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = {K8S / name for name in kustomization["resources"]}
    assert listed == {path for path in manifests() if "optional" not in path.parts}
    assert kustomization["namespace"] == "memmachine"
    assert [image["name"] for image in kustomization["images"]] == ["memmachine"]


def test_api_runs_replicas_behind_a_service_with_health_probes() -> None:
    found = resources()
    api = found[("Deployment", "memmachine-api")]
    config = found[("ConfigMap", "memmachine-config")]["data"]
    assert api["spec"]["replicas"] >= 2
    main = container(api)
    assert main["args"] == ["memmachine", "serve"]
    (port,) = main["ports"]
    assert port == {"name": "http", "containerPort": int(config["MEMMACHINE_PORT"])}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert main[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
    # the startup probe outlasts the time startup may spend waiting for the stores
    startup = main["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] > float(
        config["MEMMACHINE_STARTUP_TIMEOUT_SECONDS"]
    )

    service = found[("Service", "memmachine-api")]
    pods = api["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pods.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    worker_pods = found[("Deployment", "memmachine-worker")]["spec"]["template"]["metadata"]
    assert not service["spec"]["selector"].items() <= worker_pods["labels"].items()
    budget = found[("PodDisruptionBudget", "memmachine-api")]
    assert budget["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]


def test_workers_run_the_jobs_the_api_does_not() -> None:
    found = resources()
    config = found[("ConfigMap", "memmachine-config")]["data"]
    worker = container(found[("Deployment", "memmachine-worker")])
    assert worker["args"] == ["memmachine", "worker"]
    assert worker["ports"] == [{"name": "metrics", "containerPort": 9090}]  # no API
    assert config["MEMMACHINE_METRICS_WORKER_PORT"] == "9090"
    assert config["MEMMACHINE_JOBS_IN_PROCESS_WORKER"] == "false"


def test_both_deployments_get_the_same_settings_and_secrets_only_by_reference() -> None:
    found = resources()
    config = found[("ConfigMap", "memmachine-config")]["data"]
    known = settings_variables()
    assert set(config) <= known, set(config) - known
    secretish = ("PASSWORD", "_KEY", "_KEYS", "TOKEN")
    assert not [name for name in config if name.endswith(secretish)]
    for name in ("memmachine-api", "memmachine-worker"):
        main = container(found[("Deployment", name)])
        assert main["envFrom"] == [{"configMapRef": {"name": "memmachine-config"}}]
        for variable in main["env"]:
            if variable["name"].startswith("MEMMACHINE_"):
                assert variable["name"] in known, variable["name"]
                assert "value" not in variable, variable["name"]
                assert variable["valueFrom"]["secretKeyRef"]["name"] == "memmachine-secrets"
        names = {variable["name"] for variable in main["env"]}
        for store in ("EPISODE", "PROFILE", "WORKING"):
            assert f"MEMMACHINE_{store}_STORE_PASSWORD" in names, (name, store)


def test_the_config_is_settings_memmachine_accepts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ConfigMap read as memmachine reads its environment: valid settings, store URLs
    of schemes it serves, and nothing that would keep a store per pod."""
    config = resources()[("ConfigMap", "memmachine-config")]["data"]
    for name in list(os.environ):
        if name.startswith("MEMMACHINE_"):
            monkeypatch.delenv(name)
    for name, value in config.items():
        monkeypatch.setenv(name, value)
    settings = Settings()
    urls = {
        "episode": settings.episode_store_url,
        "profile": settings.profile_store_url,
        "working": settings.working_store_url,
    }
    assert all(url is not None for url in urls.values()), "every store is a server"
    scheme = {key: urlsplit(url.get_secret_value()).scheme for key, url in urls.items() if url}
    assert scheme["episode"] in NEO4J_SCHEMES
    assert scheme["profile"] == "postgresql+psycopg"
    assert scheme["working"] in REDIS_SCHEMES
    assert settings.memory_types_store == "redis"
    assert settings.jobs.in_process_worker is False
    assert settings.auth == "on"
