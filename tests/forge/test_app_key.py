"""The GitHub App's private key mints installation tokens: no tool of any site reads it
and no sandboxed command sees it, wherever the operator keeps it."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.app import build_baton
from bot.errors import ToolError
from bot.tools.files import ReadFileArgs
from bot.tools.shell import BashArgs
from tests.conftest import make_settings
from tests.fakes.openai_api import FakeOpenAI

KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEsecretkeymaterial\n-----END RSA PRIVATE KEY-----\n"


async def test_the_app_key_is_out_of_every_tools_reach(tmp_path: Path) -> None:
    # The worst place an operator could keep it: inside the workspace itself.
    workspace = tmp_path / "ws"
    key = workspace / "keys" / "app.pem"
    key.parent.mkdir(parents=True)
    key.write_text(KEY)
    async with FakeOpenAI() as fake:
        settings = make_settings(
            tmp_path, fake.url, github_token=None, github_app_id="4242",
            github_app_private_key=key,
        )  # fmt: skip
        baton = await build_baton(settings)
        try:
            site = baton.default_site
            assert key in site.workspace.private_files
            assert key in site.policy.masked
            read_file = site.tools.get("read_file")
            assert read_file is not None
            for path in ("keys/app.pem", str(key), "./keys/../keys/app.pem"):
                with pytest.raises(ToolError):
                    await read_file.run(ReadFileArgs(path=path))
            if not site.sandbox.available:
                pytest.skip("no OS sandbox here: commands run unsandboxed, each asked for")
            bash = site.tools.get("bash")
            assert bash is not None
            shown = await bash.run(
                BashArgs(command="cat keys/app.pem; wc -c keys/app.pem; grep -r secretkey .")
            )
            assert "wc" not in shown or "0 keys/app.pem" in shown, shown
            assert "secretkeymaterial" not in shown, shown
        finally:
            await baton.close()
    assert key.read_text() == KEY  # nothing wrote over it either
