"""Baton's image run as containers with Podman, driven like the replicas of tests/replicas.

The containers share the host's network, so they reach the fake Slack, the fake model
and PostgreSQL on loopback, and the tests reach each container's PORT there. They run
as deploy/compose.yaml says (its confinement is read from it): read-only, no
capabilities, the shipped seccomp profile, and a /proc that bubblewrap may mount
anew. What only this machine needs (runc, ulimits below its hard limits) comes from
CONTAINERS_CONF, which .ci/containers.sh writes.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.ports import free_port
from tests.replicas.harness import Cluster, Replica, collect_lines
from tests.slack.harness import SIGNING_SECRET

REPOSITORY = Path(__file__).resolve().parents[2]
DEPLOY = REPOSITORY / "deploy"
SECCOMP = DEPLOY / "seccomp.json"
IMAGE = os.environ.get("BATON_TEST_IMAGE", "")
# The image's user (Containerfile): the workspace and state it is given are its own.
BATON_UID = 10001

# A container test builds on images and starts replicas: it may take minutes, not the
# suite's 300 s cap, before a hang is called one.
CONTAINER_TEST_TIMEOUT_S = 900

needs_image = pytest.mark.skipif(
    not IMAGE, reason="BATON_TEST_IMAGE is not set (.ci/containers.sh builds the image)"
)


def compose_confinement(*, unmasked: bool = True) -> list[str]:
    """The options of deploy/compose.yaml's Baton service that confine it, for podman run.

    Read from the shipped file, so the tests run what operators run; `unmasked=False`
    leaves /proc masked, as a container engine does by default.
    """
    service = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["x-baton"]
    options = ["--read-only"] if service["read_only"] else []
    options += [f"--cap-drop={cap}" for cap in service["cap_drop"]]
    for option in service["security_opt"]:
        if option.startswith("seccomp=./"):
            option = f"seccomp={DEPLOY / option.removeprefix('seccomp=./')}"
        if option == "systempaths=unconfined" and not unmasked:
            continue
        options.append(f"--security-opt={option}")
    return options


# How long one podman or podman-compose command may take before the test fails with
# what it printed (a `podman kube play` once hung for two hours on these machines).
TOOL_TIMEOUT_S = 300


async def tool_output(program: str, *args: str, cwd: Path | None = None, check: bool = True) -> str:
    """Run `program` (podman, podman-compose); its output, stdout and stderr together.
    With `check`, a failure fails the test with that output. A command that outlives
    TOOL_TIMEOUT_S is killed, and fails the test (with `check` or not) with what it printed."""
    process = await asyncio.create_subprocess_exec(
        program, *args, cwd=cwd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    stdout = process.stdout
    assert stdout is not None
    chunks: list[bytes] = []

    async def read() -> None:
        while chunk := await stdout.read(65536):
            chunks.append(chunk)
        await process.wait()

    try:
        await asyncio.wait_for(read(), TOOL_TIMEOUT_S)
    except TimeoutError:
        # SIGTERM first: podman killed outright may keep a lock of its own held for good.
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()
        printed = b"".join(chunks).decode(errors="replace")
        raise AssertionError(
            f"{program} {' '.join(args)} still ran after {TOOL_TIMEOUT_S} s; killed."
            f" It printed:\n{printed}"
        ) from None
    text = b"".join(chunks).decode(errors="replace")
    if check and process.returncode != 0:
        raise AssertionError(f"{program} {' '.join(args)} failed ({process.returncode}):\n{text}")
    return text


async def podman(*args: str, check: bool = True) -> str:
    return await tool_output("podman", *args, check=check)


def owned_directory(path: Path, mode: int = 0o755) -> Path:
    """A directory of the host that the container's user owns."""
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, BATON_UID, BATON_UID)
    path.chmod(mode)
    return path


@dataclass
class Container(Replica):
    """One `podman run` of the image; `process` is the podman client attached to it."""

    container: str = ""


@dataclass
class ContainerCluster(Cluster):
    """Replicas that are containers of the image, with a baton.yaml mounted read-only."""

    config: str = ""
    unmasked: bool = True
    containers: list[str] = field(default_factory=list)

    async def launch(self, name: str, **extra: str) -> Replica:
        owned_directory(self.workspace)
        state = owned_directory(self.root / f"state-{name}", 0o700)
        config = self.root / "baton.yaml"
        config.write_text(self.config)
        env = {
            "SLACK_BOT_TOKEN": "xoxb-test", "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": self.slack.url, "PORT": str(free_port()),
            "OPENAI_BASE_URL": self.llm.url, "OPENAI_API_KEY": "sk-test",
            "BATON_MODEL": "fake-model", "DATABASE_URL": self.database_url,
            "BATON_CONFIG": "/etc/baton/baton.yaml", **extra,
        }  # fmt: skip
        container = f"baton-test-{name.lower()}-{secrets.token_hex(4)}"
        args = [
            "run", "--rm", "--name", container, "--network", "host", "--no-healthcheck",
            *compose_confinement(unmasked=self.unmasked),
            "-v", f"{self.workspace}:/workspace", "-v", f"{state}:/var/lib/baton",
            "-v", f"{config}:/etc/baton/baton.yaml:ro",
            *(f"--env={key}={value}" for key, value in env.items()), IMAGE,
        ]  # fmt: skip
        self.containers.append(container)
        return await self._attach(name, env, container, "run", *args[1:])

    async def follow(self, name: str, env: dict[str, str], container: str) -> Replica:
        """A container Podman started by itself (`kube play`), its output followed."""
        return await self._attach(name, env, container, "logs", "--follow", container)

    async def _attach(self, name: str, env: dict[str, str], container: str, *args: str) -> Replica:
        process = await asyncio.create_subprocess_exec(
            "podman", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
        )
        replica = Container(name=name, env=env, process=process, container=container)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                replica.readers.append(asyncio.create_task(collect_lines(stream, replica.output)))
        self.replicas.append(replica)
        return replica

    def kill(self, replica: Replica) -> float:
        raise NotImplementedError("these tests stop containers with terminate()")

    def terminate(self, replica: Replica) -> float:
        """SIGTERM to the container's process, as a deploy (podman stop, kubelet) sends."""
        assert isinstance(replica, Container)
        asyncio.get_running_loop().create_task(
            podman("kill", "--signal", "TERM", replica.container, check=False)
        )
        return time.monotonic()

    async def close(self) -> None:
        if self.containers:
            # --ignore: without it, one container already gone (`--rm` after its exit)
            # makes podman remove none of them, and say nothing.
            await podman("rm", "--force", "--ignore", "--time", "0", *self.containers, check=False)
        await super().close()


async def relay(port: int) -> asyncio.Server:
    """A TCP relay on every interface to 127.0.0.1:`port`: how containers on a bridge
    network (compose's) reach a fake that listens on loopback, as
    `host.containers.internal:<the relay's port>`."""

    async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
            if sink.can_write_eof():
                sink.write_eof()
        except OSError:
            sink.close()

    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
        finally:
            upstream_writer.close()
            writer.close()

    return await asyncio.start_server(connect, "0.0.0.0", 0)
