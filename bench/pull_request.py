"""From the Open pull request click to the pull request's link in the thread.

Run: `.venv/bin/python -m bench.pull_request [--files N] [--runs R]`.

Each run, a thread's model writes N files (a 50-file change by default); Baton commits
them on the thread's branch and offers the change. Then a person clicks Open pull
request, and the clock runs until the link is in the thread: Baton measures the
change, pushes the branch over smart HTTP (git's own http-backend behind a
token-checking server on loopback), opens the draft pull request on a fake GitHub
REST API through gidgethub, and posts the link (Slack paced at its real rates).

The floor, measured in the same run on the same servers: a bare `git push` of an
equal N-file commit from a plain clone, then one `POST /repos/…/pulls` with aiohttp.
Target: at most 2 s from the click to the link.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import aiohttp

from bot.slack.forge_views import OPEN_PULL
from bot.slack.rate_budget import RateBudget
from tests.fakes.openai_api import Reply, ToolCallSpec
from tests.slack.forge_harness import CHANNEL, REPO, TOKEN, ForgeHarness, start_forge_harness
from tests.slack.harness import ALICE, until

TARGET_S = 2.0


def change(files: int, run: int) -> list[Reply]:
    """The model writes `files` files of 40 lines each, then answers."""
    calls = [
        ToolCallSpec(
            "write_file",
            {
                "path": f"src/module_{run}_{n:03d}.py",
                "content": "".join(f"value_{i} = {i * n}\n" for i in range(40)),
            },
            id=f"w{n}",
        )
        for n in range(files)
    ]
    return [Reply(tool_calls=calls), Reply(text=f"Wrote {files} files.")]


async def click_to_link(forge: ForgeHarness, files: int, run: int) -> float:
    slack = forge.slack
    slack.llm.script(*change(files, run))
    thread = await slack.mention(f"write {files} modules, run {run}", channel=CHANNEL)
    await until(lambda: slack.find_button(CHANNEL, thread, OPEN_PULL) is not None, 60)
    await slack.settle(60)
    await asyncio.sleep(1.5)  # a person reads the change first: the channel's pace is free
    button = slack.find_button(CHANNEL, thread, OPEN_PULL)
    assert button is not None
    started = time.perf_counter()
    await slack.click(OPEN_PULL, button["button"]["value"], user=ALICE, channel=CHANNEL)
    await until(
        lambda: any("Opened draft pull request" in t for t in slack.bot_texts(CHANNEL, thread)),
        60,
    )
    return time.perf_counter() - started


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


async def floor(forge: ForgeHarness, files: int, run: int, scratch: Path) -> float:
    """A bare push of an equal commit from a plain clone, then one PR request."""
    clone = scratch / f"floor-{run}"
    header = "Authorization: Basic " + base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    url = forge.git.repo_url(REPO)
    # In a thread: the git server answering the clone runs on this event loop.
    await asyncio.to_thread(
        _git, scratch, "-c", f"http.extraHeader={header}", "clone", "--quiet", url, clone.name
    )
    branch = f"floor/{run}"
    _git(clone, "checkout", "--quiet", "-b", branch)
    for n in range(files):
        path = clone / "src" / f"floor_{run}_{n:03d}.py"
        path.parent.mkdir(exist_ok=True)
        path.write_text("".join(f"value_{i} = {i * n}\n" for i in range(40)))
    _git(clone, "add", "--all")
    _git(clone, "-c", "user.name=Floor", "-c", "user.email=f@x", "commit", "--quiet", "-m", "f")
    started = time.perf_counter()
    process = await asyncio.create_subprocess_exec(
        "git", "-c", f"http.extraHeader={header}", "push", "--quiet", url,
        f"{branch}:refs/heads/{branch}", cwd=clone,
    )  # fmt: skip
    assert await process.wait() == 0
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{forge.github.url}/repos/{REPO}/pulls",
            json={"title": "floor", "head": branch, "base": "main", "draft": True},
            headers={"Authorization": f"token {TOKEN}", "Accept": "application/vnd.github+json"},
        ) as response:
            assert response.status == 201, await response.text()
    return time.perf_counter() - started


async def measure(files: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        async for forge in start_forge_harness(root, rate_budget=RateBudget()):
            baton: list[float] = []
            bare: list[float] = []
            for run in range(runs):
                baton.append(await click_to_link(forge, files, run))
                bare.append(await floor(forge, files, run, root))
            print(f"{files}-file change, {runs} runs, Slack at its real pace")
            print(
                f"  click to link: median {statistics.median(baton):.3f} s, "
                f"max {max(baton):.3f} s (target ≤ {TARGET_S:.1f} s)"
            )
            print(
                f"  floor (bare git push + one PR request): median "
                f"{statistics.median(bare):.3f} s, max {max(bare):.3f} s"
            )
            ratio = statistics.median(baton) / statistics.median(bare)
            print(f"  Baton / floor: {ratio:.2f} times")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(measure(args.files, args.runs))


if __name__ == "__main__":
    main()
