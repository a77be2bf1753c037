"""The shipped deployment files agree with each other and with Baton (no engine needed).

The containers themselves run in tests/deploy/test_containers.py (CI, with Podman);
these checks read the files, so a change that breaks one of their promises fails in
every test run: the grace period above Baton's drain, the probes on the right
endpoints, secrets only by reference, the config Baton accepts, the sandbox settings.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from bot.config import load_file_config
from tests.deploy.containers import DEPLOY, REPOSITORY

KUBERNETES = DEPLOY / "kubernetes"
DEFAULT_GRACE_S = 25  # BATON_SHUTDOWN_GRACE_S's default (docs/operations.md)


def kube(kind: str) -> dict[str, Any]:
    found = [
        document
        for path in sorted(KUBERNETES.glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if document and document.get("kind") == kind
    ]
    assert len(found) == 1, f"{len(found)} {kind} manifests"
    return found[0]


def deployment_container() -> dict[str, Any]:
    (container,) = kube("Deployment")["spec"]["template"]["spec"]["containers"]
    return container


def compose() -> dict[str, Any]:
    return yaml.safe_load((DEPLOY / "compose.yaml").read_text())


def containerfile() -> str:
    return (REPOSITORY / "Containerfile").read_text()


def image_env(name: str) -> str:
    match = re.search(rf"\b{name}=(\S+)", containerfile())
    assert match, f"the Containerfile sets no {name}"
    return match.group(1)


def test_every_manifest_the_kustomization_lists_exists_and_none_is_left_out() -> None:
    listed = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())["resources"]
    present = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(listed) == present


def test_kubernetes_lets_a_replica_drain_before_it_is_killed() -> None:
    spec = kube("Deployment")["spec"]
    assert spec["replicas"] == 2
    grace = {e["name"]: e.get("value") for e in deployment_container()["env"]}
    drain = int(grace.get("BATON_SHUTDOWN_GRACE_S") or DEFAULT_GRACE_S)
    assert spec["template"]["spec"]["terminationGracePeriodSeconds"] > drain
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0


def test_compose_lets_a_replica_drain_before_it_is_killed() -> None:
    grace = compose()["x-baton"]["stop_grace_period"]
    assert grace.endswith("s") and int(grace[:-1]) > DEFAULT_GRACE_S


def test_the_probes_ask_readyz_for_readiness_and_healthz_for_liveness() -> None:
    container = deployment_container()
    port = container["ports"][0]["containerPort"]
    assert {"name": "PORT", "value": str(port)} in container["env"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": port}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": port}
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    annotations = kube("Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/path"] == "/metrics"
    assert annotations["prometheus.io/port"] == str(port)
    assert "/readyz" in str(compose()["x-baton"]["healthcheck"]["test"])
    assert "/healthz" in containerfile().split("HEALTHCHECK", 1)[1].split("\n\n")[0]


def test_the_service_and_the_disruption_budget_select_the_pods() -> None:
    labels = kube("Deployment")["spec"]["template"]["metadata"]["labels"]
    for selector in (
        kube("Service")["spec"]["selector"],
        kube("PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        kube("Deployment")["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= labels.items(), selector
    assert kube("PodDisruptionBudget")["spec"]["minAvailable"] == 1


def test_secrets_come_only_by_reference() -> None:
    for path in [*KUBERNETES.glob("*.yaml"), DEPLOY / "compose.yaml"]:
        text = path.read_text()
        assert "kind: Secret" not in text, path
        assert not re.search(r"xox[bpa]-[0-9A-Za-z]|sk-[0-9A-Za-z]{8}", text), path
    assert deployment_container()["envFrom"] == [{"secretRef": {"name": "baton-secrets"}}]
    service = compose()["x-baton"]
    assert service["env_file"] == ".env"
    example = (DEPLOY / ".env.example").read_text()
    for needed in (
        "SLACK_BOT_TOKEN",
        "SLACK_SIGNING_SECRET",
        "OPENAI_API_KEY",
        "POSTGRES_PASSWORD",
    ):
        assert re.search(rf"^{needed}=", example, re.M), needed
    ignored = (REPOSITORY / ".gitignore").read_text().split()
    assert "deploy/.env" in ignored


def test_the_shipped_configs_are_ones_baton_accepts(tmp_path: Path) -> None:
    (tmp_path / "k8s.yaml").write_text(kube("ConfigMap")["data"]["baton.yaml"])
    for path in (tmp_path / "k8s.yaml", DEPLOY / "baton.example.yaml"):
        config = load_file_config(path)  # raises ConfigError on anything Baton refuses
        assert config.model == "gpt-4.1-mini"
        assert "bash" in config.permissions.ask, path


def test_compose_runs_two_replicas_on_one_workspaces_volume_each_with_its_own_state() -> None:
    services = compose()["services"]
    replicas = {
        name: s for name, s in services.items() if s.get("image") == "localhost/baton:latest"
    }
    assert len(replicas) == 2
    state_dir, workspace = image_env("BATON_STATE_DIR"), image_env("BATON_WORKSPACE")
    states = set()
    for service in replicas.values():
        mounts = {v.split(":")[1]: v.split(":")[0] for v in service["volumes"]}
        assert mounts[workspace] == "workspaces"
        states.add(mounts[state_dir])
        assert service["environment"]["DATABASE_URL"].startswith("postgresql://")
        assert service["read_only"] is True
    assert len(states) == 2
    mounts = {m["mountPath"]: m["name"] for m in deployment_container()["volumeMounts"]}
    assert mounts[workspace] == "workspaces" and mounts[state_dir] == "state"
    assert kube("PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_image_runs_unprivileged_read_only_from_a_chosen_base() -> None:
    text = containerfile()
    assert re.search(r"^ARG BASE_IMAGE=\S*python:3\.\d+-slim", text, re.M)
    assert text.count("FROM ${BASE_IMAGE}") == 2  # multi-stage, both from the argument
    assert re.search(r"^USER 10001:10001$", text, re.M)
    assert 'ENTRYPOINT ["python", "-m", "bot"]' in text
    context = deployment_container()["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert kube("Deployment")["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"]
    assert compose()["x-baton"]["cap_drop"] == ["ALL"]


def test_the_seccomp_profile_allows_what_bubblewrap_needs_and_still_refuses_the_rest() -> None:
    profile = json.loads((DEPLOY / "seccomp.json").read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    unconditional = {
        name
        for rule in profile["syscalls"]
        if rule["action"] == "SCMP_ACT_ALLOW" and not rule.get("includes") and not rule.get("args")
        for name in rule["names"]
    }
    needed = {"unshare", "clone", "mount", "pivot_root", "umount2", "sethostname"}
    assert needed <= unconditional, needed - unconditional
    # What no sandbox needs stays refused: the kernel's modules, kexec, bpf, handles.
    refused = {"init_module", "finit_module", "kexec_load", "bpf", "open_by_handle_at"}
    assert not refused & unconditional, refused & unconditional
