"""Paths that hold secrets: the checks behind the ``secret-path`` danger pattern.

A path is compared with known secrets component by component, as written (it is
never resolved against the file system): SSH, cloud and other credentials
directories, credential files, ``.env`` files, private keys, shell histories,
``/etc/shadow`` and ``/etc/sudoers``, a process environment. :func:`find_path_danger`
checks a file tool's path argument; :func:`find_word_danger` checks one word of a
``bash`` command, including what bash would make of its braces and globs
(:mod:`bot.permissions.globs`), so ``~/.ss[h]/id_rs[a]`` and ``.e?v`` count.
"""

from __future__ import annotations

import re

from bot.permissions.danger_patterns import PATTERN_BY_ID, DangerMatch, shown_text
from bot.permissions.globs import expand_braces, glob_spellings

__all__ = ["find_path_danger", "find_word_danger"]

_SECRET_DIRS = {
    ".ssh": "SSH keys and configuration",
    ".aws": "AWS credentials",
    ".gnupg": "GnuPG private keys",
    ".kube": "Kubernetes credentials",
    ".azure": "Azure credentials",
    ".password-store": "Password store",
}
_SECRET_FILES = {
    ".netrc": "Login credentials",
    "_netrc": "Login credentials",
    ".pgpass": "PostgreSQL passwords",
    ".git-credentials": "Git credentials",
    ".npmrc": "npm configuration, which often holds auth tokens",
    ".pypirc": "PyPI configuration, which often holds upload tokens",
    ".vault-token": "Vault token",
    ".my.cnf": "MySQL credentials",
    ".s3cfg": "S3 credentials",
    ".boto": "Cloud credentials",
    ".dockercfg": "Docker registry credentials",
}
_HISTORY_FILES = frozenset(
    {".bash_history", ".zsh_history", ".sh_history", ".history", ".python_history",
     ".psql_history", ".mysql_history", ".node_repl_history", ".sqlite_history",
     ".rediscli_history"}
)  # fmt: skip
_PRIVATE_KEY_NAMES = frozenset(
    {"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk"}
)
_PRIVATE_KEY_SUFFIXES = (".key", ".p12", ".pfx", ".jks", ".keystore", ".ppk")
_SYSTEM_SECRETS = {
    ("etc", "shadow"): "System password hashes",
    ("etc", "gshadow"): "System group password hashes",
    ("etc", "master.passwd"): "System password hashes",
    ("etc", "sudoers"): "sudo configuration",
}
# `.env.example` and friends are committed templates without real values.
_ENV_TEMPLATE_SUFFIXES = frozenset({"example", "sample", "template", "dist", "tpl", "tmpl"})
_GLOB_CHARS = frozenset("*?[")


_SECRET_NAMES = frozenset(
    {*_SECRET_DIRS, *_SECRET_FILES, *_HISTORY_FILES, *_PRIVATE_KEY_NAMES, ".env", ".envrc",
     "environ", "shadow", "gshadow", "sudoers", "sudoers.d", "master.passwd", "gcloud",
     "config.json", "hosts.yml", "proc", "etc", ".config", ".docker", "gh",
     *(f"x{suffix}" for suffix in _PRIVATE_KEY_SUFFIXES)}
)  # fmt: skip
"""Names a glob in a shell word is tried against (see :func:`glob_spellings`)."""


def find_path_danger(path: str) -> DangerMatch | None:
    """Check a file tool's path argument (or any shell word) for secrets.

    Matched, by path component so ``/home/me/.ssh/id_rsa``, ``~/.aws``, ``$HOME/.kube/config``
    and ``../.env`` all count:

    * secrets directories: ``.ssh``, ``.aws``, ``.gnupg``, ``.kube``, ``.azure``,
      ``.password-store``, ``.config/gcloud``; ``.docker/config.json``,
      ``.config/gh/hosts.yml``;
    * credential files: ``.netrc``, ``.pgpass``, ``.git-credentials``, ``.npmrc``,
      ``.pypirc``, ``.vault-token``, ``.my.cnf``, ``.s3cfg``, ``.boto``;
    * environment files: ``.env``, ``.env.local``, ``.env.production``, ``prod.env``,
      and ``.envrc`` (direnv files usually export secrets, and direnv runs them) -- but
      not templates such as ``.env.example``, ``.env.sample``, ``.env.template``,
      ``.env.dist``; a glob like ``.env*`` counts;
    * private keys: ``id_rsa``, ``id_ed25519`` ... (not ``.pub``), ``ssh_host_*_key``,
      ``*.key``, ``*.p12``, ``*.pfx``, ``*.jks``, ``*.keystore``, ``*.ppk``, and
      ``*.pem`` files whose name says key (``privkey.pem``, ``server-key.pem``), since
      most ``.pem`` files are public certificates;
    * shell and REPL histories (``.bash_history`` ...), which often hold pasted secrets;
    * ``/etc/shadow``, ``/etc/gshadow``, ``/etc/sudoers``, ``/etc/sudoers.d/*`` and a
      process environment (``/proc/<pid>/environ``).

    Args:
        path: The path as written; it is not resolved against the file system.

    Returns:
        A ``secret-path`` match naming the kind of secret, or None.
    """
    category = _secret_category(path)
    if category is None:
        return None
    return PATTERN_BY_ID["secret-path"].match(shown_text(path), title=category)


def _secret_category(path: str) -> str | None:
    parts = [part.lower() for part in path.replace("\\", "/").split("/") if part not in ("", ".")]
    if not parts:
        return None
    for index, part in enumerate(parts):
        if part in _SECRET_DIRS:
            return _SECRET_DIRS[part]
        following = parts[index + 1 : index + 2]
        if part == ".config" and following == ["gcloud"]:
            return "Google Cloud credentials"
        if part == ".docker" and following == ["config.json"]:
            return "Docker registry credentials"
        if part == ".config" and parts[index + 1 : index + 3] == ["gh", "hosts.yml"]:
            return "GitHub CLI token"
    name = parts[-1]
    if name in _SECRET_FILES:
        return _SECRET_FILES[name]
    if name in _HISTORY_FILES:
        return "Shell history, which often holds pasted secrets"
    if _is_env_file(name):
        return "Environment file with secrets"
    if _is_private_key(name):
        return "Private key"
    if tuple(parts[-2:]) in _SYSTEM_SECRETS:
        return _SYSTEM_SECRETS[(parts[-2], parts[-1])]
    if len(parts) >= 3 and parts[-3:-1] == ["etc", "sudoers.d"]:
        return "sudo configuration"
    if name == "environ" and "proc" in parts[:-1]:
        return "Process environment, which often holds API keys"
    return None


def _is_env_file(name: str) -> bool:
    if name in (".env", ".envrc"):
        return True
    if name.startswith((".env.", ".env-", ".env_")) or (
        name.endswith(".env") and len(name) > len(".env")
    ):
        stem = name.removesuffix(".env")
        return re.split(r"[._-]", stem)[-1] not in _ENV_TEMPLATE_SUFFIXES
    return name.startswith(".env") and any(char in _GLOB_CHARS for char in name)


def _is_private_key(name: str) -> bool:
    if name in _PRIVATE_KEY_NAMES:
        return True
    if name.startswith("ssh_host_") and name.endswith("_key"):
        return True
    if name.endswith(_PRIVATE_KEY_SUFFIXES):
        return True
    return name.endswith(".pem") and ("key" in name or "priv" in name)


def find_word_danger(word: str) -> DangerMatch | None:
    """Check one word of a shell command for secrets, as bash would expand it.

    The word itself is checked with :func:`find_path_danger`, and so is each part of
    ``NAME=VALUE``, ``a:b`` or ``a,b``; then every spelling its braces and globs could
    take among the known secret names.

    Args:
        word: The shell word, quotes removed.

    Returns:
        A ``secret-path`` match naming the kind of secret, or None.
    """
    for candidate in (word, *re.split(r"[=:,]", word)):
        if candidate and (found := find_path_danger(candidate)):
            return found
    # What bash would make of it: `~/.ss[h]/id_rs[a]`, `.e?v`, `{environ,cmdline}`.
    for expanded in expand_braces(word):
        for spelling in glob_spellings(expanded, _SECRET_NAMES):
            if spelling != word and (found := _secret_category(spelling)):
                return PATTERN_BY_ID["secret-path"].match(shown_text(word), title=found)
    return None
