"""A fake forge's git host for tests: real smart HTTP, served by git's own http-backend.

An aiohttp server on 127.0.0.1 runs `git http-backend` as a CGI program for every
request, so the real git client clones, fetches and pushes over real HTTP. Every request
(fetch and push alike) must carry `Authorization: Basic …` whose password is one of the
server's tokens; any other gets 401 with `WWW-Authenticate: Basic realm="fake-forge"`.

The set-up and inspection helpers (`create_repo`, `commit_on`, `head`, `show`, ...) run
git synchronously on the bare repositories: call them between requests, never while
the client under test is talking to the server.

Example:
    async with FakeGitServer(tmp_path) as forge:
        forge.add_token("ghs_test")
        url = forge.create_repo("acme/api", files={"README.md": "hi\\n"})
        ...
        assert forge.head("acme/api", "baton/x") == local_sha
        assert all(r.authorization for r in forge.requests)
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import os
import re
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web

from tests.fakes.serving import AppServer

__all__ = ["FakeGitServer", "GitRequest"]

REALM = "fake-forge"
_REPO_NAME = re.compile(r"[A-Za-z0-9-]+/[A-Za-z0-9._-]+")
_IDENTITY = {
    "GIT_AUTHOR_NAME": "Someone Else",
    "GIT_AUTHOR_EMAIL": "someone@example.com",
    "GIT_COMMITTER_NAME": "Someone Else",
    "GIT_COMMITTER_EMAIL": "someone@example.com",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class GitRequest:
    """One request the server saw: method, path, query and the Authorization header."""

    method: str
    path: str
    query: str
    authorization: str | None
    status: int


class FakeGitServer(AppServer):
    """Bare repositories under `<base>/git-server/repos`, served over smart HTTP.

    Args:
        base: A directory of the test's own (usually `tmp_path`).
    """

    def __init__(self, base: Path) -> None:
        self._root = base / "git-server"
        self._repos = self._root / "repos"
        self._home = self._root / "home"
        self._repos.mkdir(parents=True)
        self._home.mkdir()
        self._tokens: set[str] = set()
        # Also valid: tokens this says are (a fake GitHub's installation tokens).
        self.accepts: Callable[[str], bool] | None = None
        self._protected: dict[str, set[str]] = {}
        super().__init__()
        self.requests: list[GitRequest] = []
        self.backend_errors: list[str] = []

    # ----------------------------------------------------------------- lifecycle

    def runner(self) -> web.AppRunner:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # git sends gzip bodies with Content-Encoding: http-backend inflates them itself.
        # A handler runs to its end when git hangs up first, so http-backend is always
        # waited for (a process asyncio never reaped would be reaped by someone else).
        return web.AppRunner(
            app,
            access_log=None,
            handler_cancellation=False,
            shutdown_timeout=1.0,
            auto_decompress=False,
        )

    # ----------------------------------------------------------------- credentials

    def add_token(self, token: str) -> None:
        """Accept `token` as the Basic password from now on."""
        self._tokens.add(token)

    def revoke(self, token: str) -> None:
        """Refuse `token` from now on."""
        self._tokens.discard(token)

    # ----------------------------------------------------------------- repositories

    def create_repo(
        self, name: str, *, files: dict[str, str] | None = None, branch: str = "main"
    ) -> str:
        """A bare repository `owner/repo` with one commit of `files` on `branch`; its URL."""
        bare = self._bare(name, must_exist=False)
        bare.parent.mkdir(parents=True, exist_ok=True)
        self._git(self._root, "init", "--quiet", "--bare", f"--initial-branch={branch}", str(bare))
        self._git(bare, "config", "http.receivepack", "true")
        if files is not None:
            self.commit_on(name, branch, files, "Initial commit")
        return self.repo_url(name)

    def repo_url(self, name: str) -> str:
        """The clone URL of `owner/repo`."""
        return f"{self.url}/{name}.git"

    def commit_on(
        self, name: str, branch: str, files: Mapping[str, str | None], message: str
    ) -> str:
        """Commit `files` (None deletes one) on top of `branch` as someone else; the sha."""
        bare = self._bare(name)
        parent = self.head(name, branch)
        index = self._root / f"index-{os.getpid()}"
        index.unlink(missing_ok=True)
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            if parent is not None:
                self._git(bare, "read-tree", parent, env=env)
            for path, text in files.items():
                if text is None:
                    self._git(bare, "update-index", "--force-remove", "--", path, env=env)
                    continue
                blob = self._git(bare, "hash-object", "-w", "--stdin", stdin=text).strip()
                self._git(
                    bare, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env
                )
            tree = self._git(bare, "write-tree", env=env).strip()
        finally:
            index.unlink(missing_ok=True)
        parents = ["-p", parent] if parent is not None else []
        commit = self._git(bare, "commit-tree", tree, *parents, "-m", message, env=_IDENTITY)
        commit = commit.strip()
        self._git(bare, "update-ref", f"refs/heads/{branch}", commit, parent or "")
        return commit

    def protect(self, name: str, branch: str) -> None:
        """Decline every push to `branch` with a pre-receive hook, as a protected branch."""
        bare = self._bare(name)
        self._protected.setdefault(name, set()).add(f"refs/heads/{branch}")
        refs = " ".join(sorted(self._protected[name]))
        hook = bare / "hooks" / "pre-receive"
        hook.parent.mkdir(exist_ok=True)
        hook.write_text(
            "#!/bin/sh\n"
            "while read old new ref; do\n"
            f"  for protected in {refs}; do\n"
            '    if [ "$ref" = "$protected" ]; then\n'
            '      echo "GH006: Protected branch update failed for $ref." >&2\n'
            "      exit 1\n"
            "    fi\n"
            "  done\n"
            "done\n"
            "exit 0\n"
        )
        hook.chmod(0o755)

    def head(self, name: str, branch: str) -> str | None:
        """The commit `branch` points at, or None when there is no such branch."""
        result = self._run(
            self._bare(name), "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}"
        )
        return result.stdout.strip() if result.returncode == 0 else None

    def show(self, name: str, ref: str, path: str) -> str | None:
        """The text of `path` at `ref`, or None when either is missing."""
        result = self._run(self._bare(name), "show", f"{ref}:{path}")
        return result.stdout if result.returncode == 0 else None

    def log(self, name: str, ref: str) -> list[str]:
        """The subjects of `ref`'s commits, newest first."""
        return self._git(self._bare(name), "log", "--format=%s", ref).splitlines()

    def bare_path(self, name: str) -> Path:
        """Where `owner/repo`'s bare repository lives."""
        return self._bare(name)

    # ----------------------------------------------------------------- serving

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("Authorization")
        user = self._user(authorization)
        if user is None:
            self._record(request, authorization, 401)
            return web.Response(
                status=401,
                text="Authentication required\n",
                headers={"WWW-Authenticate": f'Basic realm="{REALM}"'},
            )
        path = request.path
        if ".." in path.split("/"):
            self._record(request, authorization, 404)
            return web.Response(status=404)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self._home),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_PROJECT_ROOT": str(self._repos),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "PATH_INFO": path,
            "REQUEST_METHOD": request.method,
            "QUERY_STRING": request.query_string,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "REMOTE_USER": user,
            "REMOTE_ADDR": request.remote or "127.0.0.1",
        }
        if (length := request.headers.get("Content-Length")) is not None:
            env["CONTENT_LENGTH"] = length
        if (encoding := request.headers.get("Content-Encoding")) is not None:
            env["HTTP_CONTENT_ENCODING"] = encoding
        if (protocol := request.headers.get("Git-Protocol")) is not None:
            env["GIT_PROTOCOL"] = protocol
        process = await asyncio.create_subprocess_exec(
            "git",
            "http-backend",
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert process.stdin is not None and process.stdout is not None
        assert process.stderr is not None
        feeding = asyncio.create_task(_feed(request, process.stdin))
        errors = asyncio.create_task(process.stderr.read())
        try:
            response = await self._relay(request, process.stdout)
            await feeding
            await process.wait()
        finally:
            feeding.cancel()
            # Only a process still running is killed: killing polls first, and a poll that
            # reaps an exited one leaves asyncio's child watcher nothing to reap.
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
            stderr = await errors
        if stderr.strip():
            self.backend_errors.append(stderr.decode("utf-8", "replace"))
        self._record(request, authorization, response.status)
        return response

    async def _relay(
        self, request: web.Request, stdout: asyncio.StreamReader
    ) -> web.StreamResponse:
        """Turn the CGI program's headers into a response and stream its body after them."""
        status = 200
        headers: list[tuple[str, str]] = []
        while True:
            line = await stdout.readline()
            if not line:
                break
            text = line.decode("latin-1").rstrip("\r\n")
            if not text:
                break
            key, _, value = text.partition(":")
            if key.strip().lower() == "status":
                status = int(value.strip().split()[0])
            else:
                headers.append((key.strip(), value.strip()))
        response = web.StreamResponse(status=status)
        for key, value in headers:
            response.headers.add(key, value)
        await response.prepare(request)
        while chunk := await stdout.read(65536):
            await response.write(chunk)
        await response.write_eof()
        return response

    def _user(self, authorization: str | None) -> str | None:
        """The Basic user when the password is a valid token, else None."""
        if authorization is None or not authorization.startswith("Basic "):
            return None
        try:
            decoded = base64.b64decode(authorization.removeprefix("Basic "), validate=True)
        except (binascii.Error, ValueError):
            return None
        user, colon, password = decoded.decode("utf-8", "replace").partition(":")
        valid = password in self._tokens or (self.accepts is not None and self.accepts(password))
        if not colon or not valid:
            return None
        return user or "anonymous"

    def _record(self, request: web.Request, authorization: str | None, status: int) -> None:
        self.requests.append(
            GitRequest(
                method=request.method,
                path=request.path,
                query=request.query_string,
                authorization=authorization,
                status=status,
            )
        )

    # ----------------------------------------------------------------- git for set-up

    def _bare(self, name: str, *, must_exist: bool = True) -> Path:
        if not _REPO_NAME.fullmatch(name) or ".." in name:
            raise ValueError(f"not an owner/repo name: {name!r}")
        bare = self._repos / f"{name}.git"
        if must_exist and not bare.is_dir():
            raise KeyError(f"no repository {name!r} on the fake forge")
        return bare

    def _run(
        self,
        cwd: Path,
        *args: str,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        full_env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self._home),
            "GIT_CONFIG_NOSYSTEM": "1",
            **(env or {}),
        }
        return subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=full_env,
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
        )

    def _git(
        self,
        cwd: Path,
        *args: str,
        env: dict[str, str] | None = None,
        stdin: str | None = None,
    ) -> str:
        result = self._run(cwd, *args, env=env, stdin=stdin)
        if result.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout


async def _feed(request: web.Request, stdin: asyncio.StreamWriter) -> None:
    """Stream the request body into the CGI program, then close its input."""
    try:
        async for chunk in request.content.iter_chunked(65536):
            stdin.write(chunk)
            await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        stdin.close()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await stdin.wait_closed()
