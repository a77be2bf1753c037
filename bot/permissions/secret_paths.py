"""Paths that hold secrets: the checks behind the ``secret-path`` danger pattern.

A path is compared with known secrets component by component, as written (it is
never resolved against the file system): SSH, cloud and other credentials
directories, credential files, ``.env`` files, Terraform variables and state, private
keys and keystores, shell histories, ``/etc/shadow`` and ``/etc/sudoers``, a process
environment. :func:`find_path_danger` checks a file tool's path argument;
:func:`find_word_danger` checks one word of a ``bash`` command, including what bash
would make of its braces and globs (:mod:`bot.permissions.globs`), so
``~/.ss[h]/id_rs[a]`` and ``.e?v`` count. The sandbox hides the files this list names
from every command (:mod:`bot.sandbox.secret_files`, through :func:`secret_category`
and :func:`secret_directory_category`).
"""

from __future__ import annotations

import functools
import os
import re

from bot.permissions.danger_patterns import PATTERN_BY_ID, DangerMatch, shown_text
from bot.permissions.globs import expand_braces, glob_spellings

__all__ = [
    "find_path_danger",
    "find_word_danger",
    "secret_category",
    "secret_directory_category",
]

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
    ".htpasswd": "HTTP password hashes",
    "credentials.json": "Cloud or OAuth credentials",
    "application_default_credentials.json": "Google Cloud credentials",
    "credentials.tfrc.json": "Terraform registry token",
    ".terraformrc": "Terraform CLI configuration, which often holds registry tokens",
    "terraform.rc": "Terraform CLI configuration, which often holds registry tokens",
    "secrets.yaml": "Secrets file",
    "secrets.yml": "Secrets file",
    "secrets.json": "Secrets file",
    "secrets.toml": "Secrets file",
    "secret.yaml": "Secrets file",
    "secret.yml": "Secrets file",
    "secret.json": "Secrets file",
    "token.json": "OAuth token",
    "kubeconfig": "Kubernetes credentials",
}
# Editors' and tools' copies of a file: `.env~`, `.env.bak`, `id_rsa.orig` are secrets too.
_BACKUP_SUFFIXES = ("~", ".bak", ".orig", ".old", ".swp", ".save", ".backup")
# Files that are secret only in their tool's directory (`.cargo/config.toml` is not).
_SECRET_FILES_IN = {
    (".cargo", "credentials"): "Cargo registry token",
    (".cargo", "credentials.toml"): "Cargo registry token",
    (".gem", "credentials"): "RubyGems API key",
}
_HISTORY_FILES = frozenset(
    """
    .bash_history .zsh_history .sh_history .history .python_history .psql_history .mysql_history
    .node_repl_history .sqlite_history .rediscli_history
    """.split()
)
_PRIVATE_KEY_NAMES = frozenset(
    {"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519", "id_ecdsa_sk", "id_ed25519_sk"}
)
_PRIVATE_KEY_SUFFIXES = tuple(
    """
    .key .p12 .pfx .pkcs12 .jks .jceks .bks .keystore .ppk .p8 .pk8 .pvk
    """.split()
)
_OTHER_SECRET_SUFFIXES = {
    ".kdbx": "Password database",
    ".keytab": "Kerberos keytab",
    ".ovpn": "VPN profile, which often holds its private key",
    ".kubeconfig": "Kubernetes credentials",
}
# JSON key files by their usual names: Google's OAuth client secrets, Firebase admin
# keys, service-account keys saved as `*-key.json`.
_KEY_JSON = re.compile(r"(?:client_secret.*|firebase-adminsdk-.*|.*[-_]key)\.json")
# Terraform's values and state: variables files and the state (with its backups) hold
# the resources' passwords and keys in the clear. GitHub's Terraform.gitignore keeps
# all of them out of repositories "as they may contain sensitive data".
_TERRAFORM_VARIABLES = (".tfvars", ".tfvars.json")
_SYSTEM_SECRETS = {
    ("etc", "shadow"): "System password hashes",
    ("etc", "gshadow"): "System group password hashes",
    ("etc", "master.passwd"): "System password hashes",
    ("etc", "sudoers"): "sudo configuration",
}
# `.env.example`, `example.tfvars` and friends are committed templates without real values.
_ENV_TEMPLATE_SUFFIXES = frozenset({"example", "sample", "template", "dist", "tpl", "tmpl"})
_GLOB_CHARS = frozenset("*?[")


# Names with a common extension are left out, or every `cat *.json` would ask: the
# sandbox hides those files from commands anyway.
_COMMON_EXTENSIONS = (".json", ".yaml", ".yml", ".toml")
_SECRET_NAMES = frozenset(
    {
        *_SECRET_DIRS,
        *_HISTORY_FILES,
        *_PRIVATE_KEY_NAMES,
        ".env",
        ".envrc",
        *(name for name in _SECRET_FILES if not name.endswith(_COMMON_EXTENSIONS)),
        "environ",
        "shadow",
        "gshadow",
        "sudoers",
        "sudoers.d",
        "master.passwd",
        "gcloud",
        "config.json",
        "hosts.yml",
        "proc",
        "etc",
        ".config",
        ".docker",
        "gh",
        ".cargo",
        ".gem",
        "credentials",
        "terraform.tfvars",
        "terraform.tfstate",
        "x.tfvars",
        "x.tfstate",
        "x.tfstate.backup",
        *(f"x{suffix}" for suffix in (*_PRIVATE_KEY_SUFFIXES, *_OTHER_SECRET_SUFFIXES)),
    }
)
"""Names a glob in a shell word is tried against (see :func:`glob_spellings`)."""


def find_path_danger(path: str) -> DangerMatch | None:
    """Check a file tool's path argument (or any shell word) for secrets.

    Matched, by path component so ``/home/me/.ssh/id_rsa``, ``~/.aws``, ``$HOME/.kube/config``
    and ``../.env`` all count:

    * secrets directories: ``.ssh``, ``.aws``, ``.gnupg``, ``.kube``, ``.azure``,
      ``.password-store``, ``.config/gcloud``; ``.docker/config.json``,
      ``.config/gh/hosts.yml``;
    * credential files: ``.netrc``, ``.pgpass``, ``.git-credentials``, ``.npmrc``,
      ``.pypirc``, ``.vault-token``, ``.my.cnf``, ``.s3cfg``, ``.boto``, ``.htpasswd``,
      ``credentials.json``, ``application_default_credentials.json``,
      ``service-account*.json``, ``.cargo/credentials(.toml)``, ``.gem/credentials``,
      ``secrets.yaml`` (``.yml``, ``.json``, ``.toml``);
    * Terraform: variables (``terraform.tfvars``, ``*.auto.tfvars``, any ``*.tfvars``
      and ``*.tfvars.json`` but templates such as ``example.tfvars``), state
      (``*.tfstate``, ``*.tfstate.backup``), the CLI's configuration (``.terraformrc``,
      ``terraform.rc``) and token (``credentials.tfrc.json``);
    * environment files: ``.env``, ``.env.local``, ``.env.production``, ``prod.env``,
      and ``.envrc`` (direnv files usually export secrets, and direnv runs them) -- but
      not templates such as ``.env.example``, ``.env.sample``, ``.env.template``,
      ``.env.dist``; a glob like ``.env*`` counts;
    * private keys and keystores: ``id_rsa``, ``id_ed25519`` ... (not ``.pub``),
      ``ssh_host_*_key``, ``*.key``, ``*.p12``, ``*.pfx``, ``*.pkcs12``, ``*.jks``,
      ``*.jceks``, ``*.bks``, ``*.keystore``, ``*.ppk``, ``*.p8``, ``*.pk8``,
      ``*.pvk``, and ``*.pem`` files whose name says key (``privkey.pem``,
      ``server-key.pem``), since most ``.pem`` files are public certificates;
      KeePass databases (``*.kdbx``) and Kerberos keytabs (``*.keytab``);
    * shell and REPL histories (``.bash_history`` ...), which often hold pasted secrets;
    * ``/etc/shadow``, ``/etc/gshadow``, ``/etc/sudoers``, ``/etc/sudoers.d/*`` and a
      process environment (``/proc/<pid>/environ``).

    Args:
        path: The path as written; it is not resolved against the file system.

    Returns:
        A ``secret-path`` match naming the kind of secret, or None.
    """
    category = secret_category(path)
    if category is None:
        return None
    return PATTERN_BY_ID["secret-path"].match(shown_text(path), title=category)


@functools.lru_cache(maxsize=4096)
def secret_category(path: str) -> str | None:
    """What kind of secret `path` holds (``"Private key"``), or None; see `find_path_danger`."""
    parts = _parts(path)
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
    for suffix in _BACKUP_SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            return secret_category("/".join([*parts[:-1], name.removesuffix(suffix)]))
    if name in _SECRET_FILES:
        return _SECRET_FILES[name]
    if tuple(parts[-2:]) in _SECRET_FILES_IN:
        return _SECRET_FILES_IN[(parts[-2], parts[-1])]
    if name in _HISTORY_FILES:
        return "Shell history, which often holds pasted secrets"
    if _is_env_file(name):
        return "Environment file with secrets"
    if _is_private_key(name):
        return "Private key"
    if other := _OTHER_SECRET_SUFFIXES.get(os.path.splitext(name)[1]):
        return other
    if _is_terraform_secret(name):
        return "Terraform variables or state, which hold passwords and keys"
    if name.startswith(("service-account", "service_account")) and name.endswith(".json"):
        return "Cloud service account key"
    if _KEY_JSON.fullmatch(name):
        return "Cloud or OAuth key file"
    if tuple(parts[-2:]) in _SYSTEM_SECRETS:
        return _SYSTEM_SECRETS[(parts[-2], parts[-1])]
    if len(parts) >= 3 and parts[-3:-1] == ["etc", "sudoers.d"]:
        return "sudo configuration"
    if name == "environ" and "proc" in parts[:-1]:
        return "Process environment, which often holds API keys"
    return None


def secret_directory_category(path: str) -> str | None:
    """What kind of secrets the directory `path` holds as a whole, or None.

    Only directories that hold nothing but secrets count (``.ssh``, ``.aws``,
    ``.config/gcloud`` ...): the sandbox hides them whole. A directory named like a
    secret file (a virtualenv called ``.env``) does not.
    """
    parts = _parts(path)
    if not parts:
        return None
    if parts[-1] in _SECRET_DIRS:
        return _SECRET_DIRS[parts[-1]]
    if parts[-2:] == [".config", "gcloud"]:
        return "Google Cloud credentials"
    return None


def _parts(path: str) -> list[str]:
    return [part.lower() for part in path.replace("\\", "/").split("/") if part not in ("", ".")]


def _is_terraform_secret(name: str) -> bool:
    if name.endswith(".tfstate") or ".tfstate." in name:
        return True
    for suffix in _TERRAFORM_VARIABLES:
        if name.endswith(suffix) and len(name) > len(suffix):
            stem = name.removesuffix(suffix)
            return re.split(r"[._-]", stem)[-1] not in _ENV_TEMPLATE_SUFFIXES
    return False


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


@functools.lru_cache(maxsize=4096)
def find_word_danger(word: str) -> DangerMatch | None:
    """Check one word of a shell command for secrets, as bash would expand it.

    The answer depends on the word alone, so it is kept: a command repeats its words,
    and every call of a turn names the same files.

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
            if spelling != word and (found := secret_category(spelling)):
                return PATTERN_BY_ID["secret-path"].match(shown_text(word), title=found)
    return None
