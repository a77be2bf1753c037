"""Secret paths: which file-tool paths always ask a human, and which ordinary ones do not."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.permissions.hook import PermissionHook
from bot.permissions.rules import PermissionRules
from bot.permissions.secret_paths import (
    find_path_danger,
    find_word_danger,
    secret_category,
    secret_directory_category,
)
from bot.tools.files import ReadFile
from bot.tools.workspace import Workspace


@pytest.mark.parametrize(
    ("path", "category"),
    [
        ("~/.ssh/id_rsa", "SSH keys"),
        ("/home/me/.ssh", "SSH keys"),
        ("/home/me/.ssh/", "SSH keys"),
        ("$HOME/.aws/credentials", "AWS credentials"),
        ("/root/.gnupg", "GnuPG"),
        ("~/.kube/config", "Kubernetes"),
        ("~/.azure/accessTokens.json", "Azure"),
        ("~/.config/gcloud/credentials.db", "Google Cloud"),
        ("~/.config/gh/hosts.yml", "GitHub CLI"),
        ("~/.docker/config.json", "Docker"),
        ("~/.netrc", "Login credentials"),
        ("~/.pgpass", "PostgreSQL"),
        ("~/.git-credentials", "Git credentials"),
        ("~/.npmrc", "npm"),
        ("~/.pypirc", "PyPI"),
        (".env", "Environment file"),
        ("deploy/.env", "Environment file"),
        ("./app/../.env", "Environment file"),
        (".env.local", "Environment file"),
        (".env.production", "Environment file"),
        (".env.development.local", "Environment file"),
        ("prod.env", "Environment file"),
        (".env-staging", "Environment file"),
        (".env_prod", "Environment file"),
        (".ENV", "Environment file"),
        (".envrc", "Environment file"),
        ("**/.env*", "Environment file"),
        ("id_rsa", "Private key"),
        ("keys/id_ed25519", "Private key"),
        ("/etc/ssh/ssh_host_ed25519_key", "Private key"),
        ("tls/server.key", "Private key"),
        ("privkey.pem", "Private key"),
        ("certs/server-key.pem", "Private key"),
        ("store.p12", "Private key"),
        ("**/*.key", "Private key"),
        ("/etc/shadow", "System password hashes"),
        ("/etc/gshadow", "System group password hashes"),
        ("/etc/sudoers", "sudo configuration"),
        ("/etc/sudoers.d/admins", "sudo configuration"),
        ("/proc/1/environ", "Process environment"),
        ("~/.bash_history", "Shell history"),
        ("~/.zsh_history", "Shell history"),
        ("terraform.tfvars", "Terraform"),
        # names a review found missing: backups, kubeconfigs, OAuth and key files, VPNs
        (".env~", "Environment file"),
        ("deploy/.env.bak", "Environment file"),
        ("~/.ssh_keys/id_rsa.orig", "Private key"),
        ("kubeconfig", "Kubernetes"),
        ("clusters/prod.kubeconfig", "Kubernetes"),
        ("token.json", "OAuth token"),
        ("client_secret_1234.apps.googleusercontent.com.json", "Cloud or OAuth key file"),
        ("firebase-adminsdk-x1y2.json", "Cloud or OAuth key file"),
        ("sa-key.json", "Cloud or OAuth key file"),
        ("charts/templates/secret.yaml", "Secrets file"),
        ("office.ovpn", "VPN profile"),
        ("infra/prod.auto.tfvars", "Terraform"),
        ("staging.tfvars", "Terraform"),
        ("vars.tfvars.json", "Terraform"),
        ("terraform.tfstate", "Terraform"),
        ("envs/x.tfstate.backup", "Terraform"),
        ("**/*.tfvars", "Terraform"),
        ("credentials.json", "Cloud or OAuth credentials"),
        ("service-account.json", "Cloud service account key"),
        ("keys/service-account-foo.json", "Cloud service account key"),
        ("~/.config/gcloud/application_default_credentials.json", "Google Cloud"),
        ("application_default_credentials.json", "Google Cloud"),
        ("web/.htpasswd", "HTTP password hashes"),
        ("~/.cargo/credentials", "Cargo registry token"),
        ("~/.cargo/credentials.toml", "Cargo registry token"),
        ("~/.gem/credentials", "RubyGems API key"),
        ("~/.terraformrc", "Terraform CLI configuration"),
        ("terraform.rc", "Terraform CLI configuration"),
        ("~/.terraform.d/credentials.tfrc.json", "Terraform registry token"),
        ("secrets.yaml", "Secrets file"),
        ("charts/app/secrets.yml", "Secrets file"),
        ("AuthKey_ABC123.p8", "Private key"),
        ("platform.pk8", "Private key"),
        ("truststore.bks", "Private key"),
        ("bundle.pkcs12", "Private key"),
        ("keys.jceks", "Private key"),
        ("passwords.kdbx", "Password database"),
        ("/etc/krb5.keytab", "Kerberos keytab"),
    ],
)
def test_secret_paths(path: str, category: str) -> None:
    match = find_path_danger(path)
    assert match is not None, path
    assert match.pattern == "secret-path"
    assert match.reason.startswith(category)
    assert f"({path})" in match.reason


@pytest.mark.parametrize(
    "path",
    [
        "",
        ".",
        "src/app.py",
        "README.md",
        ".env.example",
        "config/.env.sample",
        ".env.template",
        ".env.dist",
        "example.env",
        ".env-example",
        "env.d.ts",
        ".venv/bin/python",
        ".env/bin/python",  # a virtualenv named .env: only the file itself is secret
        "environment.yml",
        "src/env.py",
        "docs/ssh.md",
        "id_rsa.pub",
        "~/.ssh_notes",
        "certs/ca.pem",
        "cert.pem",
        "/etc/hosts",
        "/etc/passwd",
        "~/.bashrc",
        "**/*.py",
        "*",
        "terraform.tfvars.example",  # templates, as for .env files
        "example.tfvars",
        "main.tf",
        ".terraform.lock.hcl",
        ".cargo/config.toml",
        "credentials",  # only in .cargo/ or .gem/ (or .aws/)
        "docs/credentials.md",
        "secrets.md",
        "service-account.yaml",
        "package.json",
        "tsconfig.json",
        "README.md~",
        "notes.swp",
        "keys.md",
    ],
)
def test_ordinary_paths(path: str) -> None:
    assert find_path_danger(path) is None


@pytest.mark.parametrize(
    ("word", "secret"),
    [
        ("*.tfvars", True),
        ("terraform.tfvar?", True),
        ("*.tfstate*", True),
        ("~/.cargo/cred*", True),
        ("*.p8", True),
        # Names with a common extension are not guessed from globs: every `cat *.json`
        # would ask, and the sandbox hides those files from commands anyway.
        ("*.json", False),
        ("config/*.yaml", False),
        ("*.yml", False),
    ],
)
def test_globs_that_may_name_new_secrets(word: str, secret: bool) -> None:
    assert (find_word_danger(word) is not None) == secret


@pytest.mark.parametrize(
    ("path", "category"),
    [
        (".ssh", "SSH keys"),
        ("deploy/.aws", "AWS credentials"),
        ("home/.config/gcloud", "Google Cloud"),
        (".password-store", "Password store"),
        (".env", None),  # a virtualenv called .env
        (".cargo", None),
        (".config", None),
        ("keys", None),
    ],
)
def test_directories_hidden_whole(path: str, category: str | None) -> None:
    found = secret_directory_category(path)
    if category is None:
        assert found is None
    else:
        assert found is not None and found.startswith(category)


def test_every_file_under_a_secret_directory_is_secret() -> None:
    assert secret_category(".ssh/known_hosts") is not None
    assert secret_category("ops/.kube/cache/discovery") is not None


@pytest.mark.parametrize(
    "path",
    ["terraform.tfvars", "infra/prod.tfstate", "credentials.json", ".cargo/credentials.toml",
     "secrets.yml", "keys/AuthKey_X.p8"],
)  # fmt: skip
def test_read_file_on_a_new_secret_still_asks(tmp_path: Path, path: str) -> None:
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text("value\n")
    workspace = Workspace(tmp_path)
    hook = PermissionHook(PermissionRules.parse(allow=["read_file"]), workspace)
    tool = ReadFile(workspace)
    decision = hook.check(tool, tool.arguments.model_validate({"path": path}))
    assert (decision.action, decision.risk) == ("ask", "secret-path")
