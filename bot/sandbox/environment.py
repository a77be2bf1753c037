"""The environment a command starts from: a few variables it needs, nothing of the bot's."""

from __future__ import annotations

from collections.abc import Mapping

KEPT = ("PATH", "HOME", "LANG", "TERM")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Where a sandboxed command finds programs: the system directories it is shown.
SANDBOX_PATH_ROOTS = ("/usr/", "/bin", "/sbin", "/opt/")


def minimal_environment(
    environ: Mapping[str, str], *, home: str | None = None, system_path: bool = False
) -> dict[str, str]:
    """PATH, HOME, LANG and TERM from `environ`, and nothing else.

    An allow-list rather than a list of secret names: the bot's tokens hide under
    names nobody predicted, and bwrap's own environment is what `/proc/1/environ`
    shows inside the sandbox.

    Args:
        environ: The bot's environment.
        home: The HOME the command gets (the sandbox's empty home), if not the bot's.
        system_path: Keep only the PATH entries under the system directories (the
            sandbox shows no other): the bot's PATH names its home and its user
            (`/root/.cargo/bin`), which a sandboxed command has no business seeing.
    """
    kept = {name: environ[name] for name in KEPT if name in environ}
    kept.setdefault("PATH", DEFAULT_PATH)
    if system_path:
        entries = [entry for entry in kept["PATH"].split(":") if _system_entry(entry)]
        kept["PATH"] = ":".join(dict.fromkeys(entries)) or DEFAULT_PATH
    if home is not None:
        kept["HOME"] = home
    return kept


def _system_entry(entry: str) -> bool:
    return entry in ("/bin", "/sbin") or entry.startswith(SANDBOX_PATH_ROOTS)
