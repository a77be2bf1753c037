"""The image, run as containers and as the Kubernetes manifests say (issue 28's proof).

Needs Podman and an image of this checkout (BATON_TEST_IMAGE), which .ci/containers.sh
builds; skipped otherwise. Every container is removed at the end, whatever happened.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.containers import (
    CONTAINER_TEST_TIMEOUT_S,
    DEPLOY,
    IMAGE,
    SECCOMP,
    ContainerCluster,
    needs_image,
    owned_directory,
    podman,
)
from tests.fakes.openai_api import RecordedRequest, Reply, ToolCallSpec
from tests.ports import free_port
from tests.replicas.harness import cluster, text_of
from tests.slack.harness import SIGNING_SECRET

pytestmark = [needs_image, pytest.mark.timeout(CONTAINER_TEST_TIMEOUT_S)]

ALLOW_BASH = "permissions:\n  allow: [bash]\n"
# Made inside the sandbox: its hostname is bubblewrap's, its file lands in the volume.
SANDBOX_CHECK = "hostname; echo made-in-sandbox > proof.txt; cat proof.txt"
# What a hostile command would look for: the tokens in any process's environment
# (Baton's own included) and Baton's state directory. A person approves it (it reads
# /proc/*/environ, so it asks); contained all the same, it finds neither.
HOSTILE_CHECK = (
    "(env; cat /proc/*/environ) 2>/dev/null | tr '\\0' '\\n' | grep -c 'xoxb-test\\|sk-test'; "
    "ls /var/lib/baton >/dev/null 2>&1 && echo STATE-VISIBLE || echo state-hidden"
)


def last_tool_output(request: RecordedRequest) -> str:
    message = request.messages[-1]
    return str(message.get("content")) if message.get("role") == "tool" else ""


def answer_with_a_sandboxed_command(request: RecordedRequest) -> Reply:
    """The model: a bash call first, then an answer that quotes what the command said."""
    if output := last_tool_output(request):
        return Reply(text=f"COMMAND-SAID: {output}")
    asked = text_of(request.messages[-1])
    if "sandbox check" in asked:
        return Reply(tool_calls=[ToolCallSpec("bash", {"command": SANDBOX_CHECK}, id="b1")])
    if "hostile check" in asked:
        return Reply(tool_calls=[ToolCallSpec("bash", {"command": HOSTILE_CHECK}, id="b2")])
    if "slow question" in asked:
        return Reply(text="ANSWER-FROM-A after draining.", delay=3.0)
    return Reply(text="ANSWER-FROM-B with the thread's history.")


async def test_two_containers_answer_run_a_sandboxed_command_and_drain_on_sigterm(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, kind=ContainerCluster, config=ALLOW_BASH) as c:
        a, b = await c.start(2)
        for replica in (a, b):
            assert "no OS sandbox" not in replica.log(), replica.log()
            async with c.http.get(f"{replica.url}/readyz") as ready:
                assert ready.status == 200, await ready.text()
        c.llm.responder = answer_with_a_sandboxed_command

        thread = await c.mention(a, "sandbox check")
        await c.until(
            lambda: "COMMAND-SAID" in c.thread_text("C1", thread), within=60,
            what="the sandboxed command's answer",
        )  # fmt: skip
        output = last_tool_output(c.llm.requests[-1])
        assert output.splitlines()[1:] == ["sandbox", "made-in-sandbox"], output  # bwrap's name
        # The file the sandbox wrote is in the shared workspaces volume.
        assert (c.workspace / "proof.txt").read_text() == "made-in-sandbox\n"
        assert c.find_button("C1", thread, "baton_approve") is None  # the rule allowed it

        await c.reply(a, "<@UBOT> hostile check", thread_ts=thread)
        await c.until(
            lambda: c.find_button("C1", thread, "baton_approve") is not None, within=60,
            what="the approval request for the command reading every environment",
        )  # fmt: skip
        assert await c.click(a, c.find_button("C1", thread, "baton_approve")) == 200
        await c.until(
            lambda: "state-" in last_tool_output(c.llm.requests[-1]), within=60,
            what="the approved command's output",
        )  # fmt: skip
        output = last_tool_output(c.llm.requests[-1])
        assert output.splitlines()[1:] == ["0", "state-hidden"], output

        async with c.http.get(f"{a.url}/metrics") as metrics:
            assert metrics.status == 200
            figures = await metrics.text()
        assert 'baton_tool_calls_total{outcome="ok",tool="bash"} 2.0' in figures, figures
        assert "baton_runs_total" in figures

        # A deploy stops A while it answers the thread: A finishes that answer, the
        # thread's next message goes to B, which answers it with the whole history.
        await c.reply(a, "<@UBOT> slow question", thread_ts=thread)
        await c.until(
            lambda: "slow question" in text_of(c.llm.requests[-1].messages),
            what="A's slow turn under way",
        )
        c.terminate(a)
        await c.until(
            lambda: "ANSWER-FROM-A" in c.thread_text("C1", thread), within=30,
            what="A's answer, finished while it drained",
        )  # fmt: skip
        assert await c.exit_code(a, within=60) == 0, a.log()
        await c.reply(b, "<@UBOT> and now?", thread_ts=thread)
        await c.until(
            lambda: "ANSWER-FROM-B" in c.thread_text("C1", thread), within=60,
            what="the thread's next message answered by B",
        )  # fmt: skip
        history = text_of(c.llm.requests[-1].messages)
        assert "sandbox check" in history and "slow question" in history, history
        assert "Interrupted" not in c.thread_text("C1", thread)
        assert b.running


async def test_without_a_proc_it_may_mount_the_sandbox_is_refused_in_one_line_and_bash_asks(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, kind=ContainerCluster, config=ALLOW_BASH, unmasked=False) as c:
        (a,) = await c.start(1)
        notices = [line for line in a.log().splitlines() if "no OS sandbox" in line]
        assert len(notices) == 1, a.log()
        assert "every bash call there will ask a person" in notices[0]
        assert "docs/operations.md" in notices[0]  # where the settings are explained
        c.llm.responder = answer_with_a_sandboxed_command
        thread = await c.mention(a, "sandbox check")
        await c.until(
            lambda: c.find_button("C1", thread, "baton_approve") is not None, within=60,
            what="the approval request for the unsandboxed command",
        )  # fmt: skip
        assert not (c.workspace / "proof.txt").exists()


# The pod `podman kube play` makes of the Deployment: its name, then "-pod-0".
KUBE_POD = "baton-pod-0"


async def clear_kube(played: Path) -> None:
    """Remove what `podman kube play` of `played` makes: its pod (in Podman's state, or,
    from a play killed midway, its container in Podman's storage only, which still
    holds the name) and the workspaces volume."""
    await podman("kube", "down", str(played), check=False)
    await podman("pod", "rm", "--force", "--ignore", "--time", "0", KUBE_POD, check=False)
    await podman("rm", "--force", "--ignore", "--storage", f"{KUBE_POD}-baton", check=False)
    await podman("volume", "rm", "--force", "baton-workspaces", check=False)


def kube_documents(*, env: dict[str, str]) -> list[dict[str, Any]]:
    """The shipped manifests, as `podman kube play` on this machine can run them.

    Changed for the test only: the image; one replica on the host's network (two would
    share its port), so no declared ports and the probes on PORT; the Secret's values
    in a ConfigMap (Podman 4.3 reads a Secret it made as JSON and fails); no user
    namespace for the pod (it cannot mount /sys on the host's network); the shipped
    seccomp profile through Podman's annotation (it reads no seccompProfile field, and
    no procMount either: the two container tests above cover the sandbox).
    """
    documents: list[dict[str, Any]] = []
    for name in ("configmap.yaml", "workspaces.yaml", "deployment.yaml"):
        documents += yaml.safe_load_all((DEPLOY / "kubernetes" / name).read_text())
    for document in documents:
        if document["kind"] != "Deployment":
            continue
        document["spec"]["replicas"] = 1
        template = document["spec"]["template"]
        template["metadata"]["annotations"][
            "container.seccomp.security.alpha.kubernetes.io/baton"
        ] = f"localhost/{SECCOMP.name}"
        spec = template["spec"]
        spec["hostNetwork"] = True
        spec.pop("hostUsers")
        (container,) = spec["containers"]
        container["image"] = IMAGE
        container.pop("ports")
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            container[probe]["httpGet"]["port"] = int(env["PORT"])
        assert container["envFrom"] == [{"secretRef": {"name": "baton-secrets"}}]
        container["envFrom"] = [{"configMapRef": {"name": "baton-secrets"}}]
        container["env"] = [e for e in container["env"] if e["name"] != "PORT"]
    secrets = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "baton-secrets"}}
    return [*documents, {**secrets, "data": env}]


async def test_the_kubernetes_manifests_play_become_ready_and_answer_a_mention(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path, kind=ContainerCluster) as c:
        port = free_port()
        env = {
            "SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": c.slack.url, "PORT": str(port), "OPENAI_BASE_URL": c.llm.url,
            "OPENAI_API_KEY": "sk-test", "BATON_MODEL": "fake-model",
            "DATABASE_URL": c.database_url,
        }  # fmt: skip
        documents = kube_documents(env=env)
        played = tmp_path / "kube.yaml"
        played.write_text(yaml.safe_dump_all(copy.deepcopy(documents)))
        owned_directory(tmp_path / "ws")
        await clear_kube(played)  # what an earlier run killed mid-test left behind
        try:
            await podman("kube", "play", "--seccomp-profile-root", str(DEPLOY), str(played))
            pod = await c.follow("pod", env, f"{KUBE_POD}-baton")
            await c.wait_healthy(pod, path="/readyz")
            # Podman 4.3 reads no procMount, so /proc stays masked and the sandbox
            # cannot be made here: the pod says so in one line, and commands will ask.
            # (`podman logs --follow` may hand the line over after the pod is ready.)
            await c.until(lambda: "no OS sandbox" in pod.log(), within=30, what="the notice")
            notices = [line for line in pod.log().splitlines() if "no OS sandbox" in line]
            assert len(notices) == 1 and "mount proc" in notices[0], pod.log()
            (inspected,) = json.loads(await podman("inspect", f"{KUBE_POD}-baton"))
            assert inspected["HostConfig"]["ReadonlyRootfs"] is True
            assert inspected["Config"]["User"].startswith("10001"), inspected["Config"]["User"]

            c.llm.script(Reply(text="ANSWER-FROM-THE-POD"))
            thread = await c.mention(pod, "hello from kubernetes")
            await c.until(
                lambda: "ANSWER-FROM-THE-POD" in c.thread_text("C1", thread), within=60,
                what="the pod's answer",
            )  # fmt: skip
        finally:
            await clear_kube(played)
