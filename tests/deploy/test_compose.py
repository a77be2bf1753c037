"""`deploy/compose.yaml` brought up as written, with podman-compose (issue 28).

PostgreSQL, two Baton replicas and Caddy on compose's own network; Slack's requests go
to Caddy's port, as Slack's would. No registry is reachable from CI, so the official
postgres and caddy images are stood in for by Debian's packages
(.ci/images/*.Containerfile, built by .ci/containers.sh): only the services' `image`
changes. The fakes listen on loopback; the containers reach them through relays.
"""

from __future__ import annotations

import os
import secrets
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import pytest
import yaml

from tests.deploy.containers import (
    CONTAINER_TEST_TIMEOUT_S,
    DEPLOY,
    IMAGE,
    ContainerCluster,
    needs_image,
    relay,
    tool_output,
)
from tests.fakes.openai_api import Reply
from tests.replicas.harness import cluster
from tests.slack.harness import SIGNING_SECRET

STAND_INS = {
    "postgres": os.environ.get("BATON_TEST_POSTGRES_IMAGE", ""),
    "caddy": os.environ.get("BATON_TEST_CADDY_IMAGE", ""),
}
CADDY = "http://127.0.0.1:8080"

pytestmark = [
    needs_image,
    pytest.mark.timeout(CONTAINER_TEST_TIMEOUT_S),
    pytest.mark.skipif(
        not all(STAND_INS.values()) or shutil.which("podman-compose") is None,
        reason="needs podman-compose and the stand-in images (.ci/containers.sh)",
    ),
]


def project_from_deploy(into: Path, env: dict[str, str]) -> Path:
    """deploy/ copied as an operator fills it in: `.env`, `baton.yaml`, and the images."""
    shutil.copytree(DEPLOY, into, ignore=shutil.ignore_patterns("kubernetes", ".env", "baton.yaml"))
    (into / ".env").write_text("".join(f"{key}={value}\n" for key, value in env.items()))
    shutil.copy(into / "baton.example.yaml", into / "baton.yaml")
    compose = yaml.safe_load((into / "compose.yaml").read_text())
    for name, service in compose["services"].items():
        if "build" in service:
            service.pop("build")
            service["image"] = IMAGE
        elif name in STAND_INS:
            service["image"] = STAND_INS[name]
    compose.pop("x-baton")
    (into / "compose.yaml").write_text(yaml.safe_dump(compose, sort_keys=False))
    return into / "compose.yaml"


async def compose(project: str, file: Path, *args: str) -> str:
    return await tool_output(
        "podman-compose", "-p", project, "-f", str(file), *args, cwd=file.parent, check=False
    )


async def test_compose_up_serves_slack_through_caddy_from_two_replicas(tmp_path: Path) -> None:
    async with cluster(tmp_path, kind=ContainerCluster) as c:
        slack_relay = await relay(urlsplit(c.slack.url).port or 0)
        llm_relay = await relay(urlsplit(c.llm.url).port or 0)
        slack_port = slack_relay.sockets[0].getsockname()[1]
        llm_port = llm_relay.sockets[0].getsockname()[1]
        file = project_from_deploy(tmp_path / "deploy", {
            "SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": f"http://host.containers.internal:{slack_port}/api/",
            "OPENAI_BASE_URL": f"http://host.containers.internal:{llm_port}/v1",
            "OPENAI_API_KEY": "sk-test", "BATON_MODEL": "fake-model",
            "POSTGRES_PASSWORD": secrets.token_hex(12),
        })  # fmt: skip
        project = f"batonci{secrets.token_hex(3)}"
        try:
            up = await compose(project, file, "up", "-d")
            replicas = [
                await c.follow(name, {"PORT": "3000"}, f"{project}_{name}_1")
                for name in ("baton-1", "baton-2")
            ]
            caddy = await c.follow("caddy", {"PORT": "8080"}, f"{project}_caddy_1")
            await c.wait_healthy(caddy, within=180, path="/readyz")
            for replica in replicas:  # both started, migrated and registered
                await c.until(
                    lambda r=replica: "Baton listens on port 3000" in r.log(), within=120,
                    what=f"{replica.name} listening\n{up}",
                )  # fmt: skip
                # The compose file's confinement lets bubblewrap work.
                assert "no OS sandbox" not in replica.log(), replica.log()
            c.llm.script(Reply(text="ANSWER-THROUGH-COMPOSE"))
            thread = await c.mention(caddy, "hello through caddy")
            await c.until(
                lambda: "ANSWER-THROUGH-COMPOSE" in c.thread_text("C1", thread), within=60,
                what="the answer through Caddy",
            )  # fmt: skip
            async with c.http.get(f"{CADDY}/healthz") as health:
                assert health.status == 200, await health.text()
        except (AssertionError, aiohttp.ClientError):
            print(await compose(project, file, "ps"))
            raise
        finally:
            await compose(project, file, "down", "-v")
            slack_relay.close()
            llm_relay.close()
