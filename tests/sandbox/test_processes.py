"""A sandboxed command cannot see, signal or outlive the bot, nor read its environment."""

from __future__ import annotations

import asyncio
import os
import uuid

import pytest

from bot.sandbox import Sandbox
from bot.tools.shell import BashArgs
from tests.sandbox.conftest import Site, processes_with, wait_until_gone

CANARY = "BATON_TEST_CANARY_TOKEN"


def marker() -> str:
    """A `sleep` argument no other process on the machine has: 1000.<random digits>."""
    return f"1000.{uuid.uuid4().int % 10**12:012d}"


async def test_the_bots_environment_is_out_of_reach(
    site: Site, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = f"canary-{uuid.uuid4().hex}"
    monkeypatch.setenv(CANARY, secret)
    monkeypatch.setenv("SLACK_BOT_TOKEN", secret)
    bash = site.bash(sandbox)
    out = await bash.run(
        BashArgs(
            command="env; cat /proc/$PPID/environ /proc/1/environ /proc/*/environ; "
            "tr '\\0' '\\n' < /proc/self/environ"
        )
    )
    assert secret not in out
    names = await bash.run(BashArgs(command="env | cut -d= -f1 | sort"))
    assert set(names.splitlines()[1:]) <= {"PATH", "HOME", "LANG", "TERM", "PWD", "SHLVL", "_"}


async def test_the_path_names_no_home_of_the_host(
    site: Site, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bot's PATH names its home and user (a review saw /root/.cargo/bin, pyenv's
    shims); a command gets only the entries under the system directories it is shown."""
    monkeypatch.setenv("PATH", "/root/.cargo/bin:/home/alice/.pyenv/shims:/usr/local/bin:"
                               "/usr/bin:/bin:/opt/tools/bin")  # fmt: skip
    out = await site.bash(sandbox).run(BashArgs(command="echo $PATH"))
    assert out.splitlines()[1] == "/usr/local/bin:/usr/bin:/bin:/opt/tools/bin"


async def test_only_the_sandbox_processes_are_visible(site: Site, sandbox: Sandbox) -> None:
    out = await site.bash(sandbox).run(BashArgs(command="ls /proc | grep -c '^[0-9]'; echo $PPID"))
    count, parent = out.splitlines()[1:]
    # bwrap's init, bash and the `ls`/`grep` pipeline: nothing of the host.
    assert int(count) <= 4
    assert parent == "1"


async def test_killing_the_parent_leaves_the_bot_alone(site: Site, sandbox: Sandbox) -> None:
    out = await site.bash(sandbox).run(
        BashArgs(command=f"kill -9 $PPID; kill -9 {os.getpid()}; kill -9 {os.getppid()}; echo on")
    )
    assert out.splitlines()[-1] == "on"
    assert os.getppid() != 1  # our own parent, too, is still there


async def test_no_daemon_survives_the_call(site: Site, sandbox: Sandbox) -> None:
    nohup, double, detached = marker(), marker(), marker()
    command = (
        f"setsid nohup sleep {nohup} >/dev/null 2>&1 & "
        f"( ( sleep {double} >/dev/null 2>&1 & ) & ) ; "
        f"bash -c 'exec -a git-daemon-{detached} sleep 1000 </dev/null >/dev/null 2>&1 &' ; "
        "git daemon --detach --listen=127.0.0.1 --port=9419 --base-path=. --export-all "
        f"--pid-file=daemon.pid --user-path={detached}; "
        "sleep 0.2; echo started"
    )
    out = await site.bash(sandbox).run(BashArgs(command=command))
    assert out.splitlines()[-1] == "started"
    assert (site.workspace.root / "daemon.pid").exists()
    for name in (nohup, double, detached):
        assert await wait_until_gone(name) == [], name


async def test_a_timeout_kills_everything(site: Site, sandbox: Sandbox) -> None:
    child, daemon = marker(), marker()
    command = f"sleep {child} & setsid nohup sleep {daemon} >/dev/null 2>&1 & echo up; sleep 300"
    bash = site.bash(sandbox)
    out = await asyncio.wait_for(bash.run(BashArgs(command=command, timeout_s=1)), 20)
    assert "up" in out
    assert "timed out after 1 s" in out
    assert await wait_until_gone(child) == []
    assert await wait_until_gone(daemon) == []


async def test_cancelling_kills_everything(site: Site, sandbox: Sandbox) -> None:
    child, daemon = marker(), marker()
    command = f"sleep {child} & setsid nohup sleep {daemon} >/dev/null 2>&1 & sleep 300"
    task = asyncio.create_task(site.bash(sandbox).run(BashArgs(command=command)))
    # Waiting for them to start (however loaded the machine), not timing anything.
    async with asyncio.timeout(30):
        while not (processes_with(daemon) and processes_with(child)):  # noqa: ASYNC110
            await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_until_gone(child) == []
    assert await wait_until_gone(daemon) == []


async def test_cancelling_while_the_command_starts_kills_it_too(
    site: Site, sandbox: Sandbox
) -> None:
    """A cancel that lands at any step of the start (the sandbox may run already, and
    start others) leaves nothing running: the start is finished, then its whole tree
    is stopped and killed, and nothing in it can fork away meanwhile."""
    markers = []
    for turns in range(40):
        child = marker()
        markers.append(child)
        task = asyncio.create_task(
            site.bash(sandbox).run(BashArgs(command=f"sleep {child} & sleep {child}"))
        )
        for _ in range(turns):
            await asyncio.sleep(0)  # the start is under way, not done
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    for child in markers:
        assert await wait_until_gone(child) == [], child
