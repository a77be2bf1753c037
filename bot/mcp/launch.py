"""How Baton reaches one MCP server: its stdio process inside the OS sandbox, or its
Streamable HTTP endpoint.

Both give the SDK's transport, an async context manager yielding the (read, write)
streams a `ClientSession` talks over. What the server is given is decided here:

- stdio: bwrap runs `command` with the server's `env` (`${NAME}` expanded) plus PATH,
  HOME (the sandbox's empty home) and LANG, and nothing else of Baton's environment;
  the host's system directories, the commands' minimal /etc and `paths` read-only, no
  network unless `network`, and the commands' seccomp filter (no setuid or setgid
  files, see `bot.sandbox.seccomp`; none where libseccomp is missing, as for commands,
  and the sandbox's `reason` says so).
- HTTP: Baton calls `url` with `headers` (`${NAME}` expanded).

Neither ever carries one of Baton's own secrets: a name is refused when the config is
read (`bot.config.SECRET_VARIABLES`), a value here, whatever variable it came from.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TextIO

import httpx2

from bot.config import ENV_REFERENCE, McpServerConfig
from bot.errors import BatonError
from bot.redaction import MIN_SECRET_LENGTH
from bot.sandbox import SANDBOX_HOME, Sandbox
from bot.sandbox.environment import DEFAULT_PATH
from bot.sandbox.profile import build_server_profile, etc_entries
from bot.sandbox.runner import SECCOMP_FILE

logger = logging.getLogger(__name__)

# A Streamable HTTP server's answers may stream for a while; connecting may not.
HTTP_CONNECT_S = 10.0
# What stdio_client adds to every server's environment, taken out again in the sandbox.
_SDK_DEFAULTS = ("LOGNAME", "SHELL", "TERM", "USER")
# The host's shell, which opens the seccomp filter for bwrap (see `_with_filter`), and
# the descriptor it opens it on (the first after stdin, stdout and stderr: the SDK's
# process starts with no other).
HOST_SHELL = "/bin/sh"
FILTER_FD = 3

Transport = AbstractAsyncContextManager[Any]
Opener = Callable[[TextIO | None, Sandbox], Transport]


class LaunchError(BatonError):
    """A server cannot be started as configured (a variable unset, a path missing, no
    sandbox); the message says which."""


def expand(
    values: Mapping[str, str], environ: Mapping[str, str], secrets: Collection[str], where: str
) -> dict[str, str]:
    """`values` with each `${NAME}` replaced by that environment variable.

    Raises:
        LaunchError: A variable is not set, or a value holds one of Baton's secrets.
    """
    expanded: dict[str, str] = {}
    for key, value in values.items():

        def variable(match: Any, key: str = key) -> str:
            name = match.group(1)
            if name not in environ:
                raise LaunchError(f"{where}.{key} uses ${{{name}}}, which is not set")
            return environ[name]

        text = ENV_REFERENCE.sub(variable, value)
        # As in redaction: a very short value would be found in innocent text.
        if any(len(secret) >= MIN_SECRET_LENGTH and secret in text for secret in secrets):
            raise LaunchError(
                f"{where}.{key} holds one of Baton's own secrets: an MCP server never gets them"
            )
        expanded[key] = text
    return expanded


def stdio_transport(
    name: str,
    config: McpServerConfig,
    *,
    sandbox: Sandbox,
    environ: Mapping[str, str],
    secrets: Collection[str],
    masked: Sequence[Path],
    errlog: TextIO,
) -> Transport:
    """The stdio transport of a server: its command under bwrap, its stderr to `errlog`.

    Raises:
        LaunchError: No sandbox here, a path missing, or a bad `env` value.
    """
    assert config.command is not None
    if not sandbox.available or sandbox.binary is None:
        raise LaunchError(
            f"stdio MCP servers run only in the OS sandbox, and there is none here: "
            f"{sandbox.reason}"
        )
    missing = [str(p) for p in config.paths if not p.exists()]
    if missing:
        raise LaunchError(f"mcp_servers.{name}.paths: {', '.join(missing)} does not exist")
    for path in config.paths:
        real = path.resolve()
        if hidden := next((m for m in masked if real.is_relative_to(m.resolve())), None):
            raise LaunchError(
                f"mcp_servers.{name}.paths: {path} lies in {hidden}, which is Baton's own "
                "(its state, database or config): a server never sees it"
            )
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": str(SANDBOX_HOME),
        "LANG": environ.get("LANG", "C.UTF-8"),
        **expand(config.env, environ, secrets, f"mcp_servers.{name}.env"),
    }
    private = sandbox.private_files()
    profile = build_server_profile(
        paths=[p.resolve() for p in config.paths],
        masked=masked,
        network=config.network,
        empty_file=private / "empty",
        # Bound, not copied: the SDK hands bwrap no descriptors (see `_with_filter`).
        etc=etc_entries(private / "etc", config.network),
        user_namespace=sandbox.user_namespace,
    )
    # The SDK adds a few of Baton's own variables (who runs it, its shell): not inside.
    unset = [item for variable in _SDK_DEFAULTS for item in ("--unsetenv", variable)]
    argv = _with_filter(
        [str(sandbox.binary), *profile, *unset], ["--", *config.command], sandbox, name
    )
    # The SDK is imported when a server is first started (see `bot.mcp.servers`).
    from mcp import StdioServerParameters, stdio_client

    parameters = StdioServerParameters(
        command=argv[0],
        args=argv[1:],
        env=env,
        cwd="/",
        # One bad byte must not silently stop the reader (the default is strict).
        encoding_error_handler="replace",
    )
    return stdio_client(parameters, errlog=errlog)


def _with_filter(bwrap: list[str], tail: list[str], sandbox: Sandbox, name: str) -> list[str]:
    """bwrap's command line for a server, started so that bwrap installs the seccomp filter.

    bwrap takes the filter only on a file descriptor (`--seccomp FD`), and the SDK's
    `stdio_client` starts the server with `anyio.open_process` without `pass_fds`: the
    child keeps stdin, stdout and stderr and nothing else, so a descriptor Baton opens
    (as `Sandbox.command` does for commands) never reaches bwrap, and starting the
    process ourselves would mean copying the SDK's transport. So the host's `/bin/sh`
    opens the filter's file (`Sandbox.private_files()`, written by Baton, read-only to
    all) on `FILTER_FD` and execs bwrap (same process, so the SDK's signals reach it),
    which reads the filter, closes the descriptor and installs the filter just before
    the server starts. The paths travel as arguments, never inside the script, so
    nothing needs quoting. Without libseccomp there is no filter: bwrap is started
    directly, as commands then run, and the sandbox's `reason` says so.
    """
    if sandbox.seccomp_filter is None:
        logger.warning("MCP server %s runs without a seccomp filter: %s", name, sandbox.reason)
        return [*bwrap, *tail]
    script = f'exec "$@" {FILTER_FD}<"$0"'
    filter_file = sandbox.private_files() / SECCOMP_FILE
    return [HOST_SHELL, "-c", script, str(filter_file), *bwrap, "--seccomp", str(FILTER_FD), *tail]


def http_transport(
    name: str,
    config: McpServerConfig,
    *,
    environ: Mapping[str, str],
    secrets: Collection[str],
) -> Transport:
    """The Streamable HTTP transport of a server, with its headers.

    Raises:
        LaunchError: A bad `headers` value.
    """
    assert config.url is not None
    headers = expand(config.headers, environ, secrets, f"mcp_servers.{name}.headers")
    return _http(config.url, headers, config.timeout_s)


@contextlib.asynccontextmanager
async def _http(url: str, headers: dict[str, str], read_s: float) -> AsyncIterator[Any]:
    from mcp.client.streamable_http import streamable_http_client

    # Our own client: the SDK takes headers and timeouts only this way, and we close it.
    timeout = httpx2.Timeout(HTTP_CONNECT_S, read=max(read_s, HTTP_CONNECT_S) + 5)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as client:
        async with streamable_http_client(url, http_client=client) as streams:
            yield streams


def secret_values(config: McpServerConfig, environ: Mapping[str, str]) -> list[str]:
    """The values a server's `${NAME}` references expand to: kept out of what people
    read (failure reasons, logs)."""
    values = [*config.env.values(), *config.headers.values()]
    names = {name for value in values for name in ENV_REFERENCE.findall(value)}
    return [environ[name] for name in names if environ.get(name)]


def opener(
    name: str,
    config: McpServerConfig,
    *,
    environ: Mapping[str, str] | None = None,
    secrets: Collection[str],
    masked: Sequence[Path],
) -> Opener:
    """A function making a fresh transport for each connection attempt: a stdio
    server's in the sandbox given, its stderr to the file given."""
    environment = dict(os.environ if environ is None else environ)

    def open_transport(errlog: TextIO | None, sandbox: Sandbox) -> Transport:
        if config.transport == "stdio":
            assert errlog is not None
            return stdio_transport(
                name,
                config,
                sandbox=sandbox,
                environ=environment,
                secrets=secrets,
                masked=masked,
                errlog=errlog,
            )
        return http_transport(name, config, environ=environment, secrets=secrets)

    return open_transport
