"""Secret paths: which file-tool paths always ask a human, and which ordinary ones do not."""

from __future__ import annotations

import pytest

from bot.permissions.secret_paths import find_path_danger


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
    ],
)
def test_ordinary_paths(path: str) -> None:
    assert find_path_danger(path) is None
