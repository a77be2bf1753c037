#!/usr/bin/env bash
# The wheel works outside the checkout: built, installed in a fresh venv in a
# temporary directory, and run there. `baton --help` starts; `baton agents` lists the
# agents shipped inside the wheel; a database made there has every migration's tables.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$root/.venv/bin/python" -m pip wheel --quiet --no-deps --wheel-dir "$work/dist" "$root"
"$root/.venv/bin/python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet --disable-pip-version-check "$work"/dist/*.whl
mkdir "$work/ws" && mkdir -m 700 "$work/state"
cd "$work/ws"
export BATON_WORKSPACE="$work/ws" BATON_STATE_DIR="$work/state" BATON_MODEL=check-model
"$work/venv/bin/baton" --help > /dev/null
agents="$("$work/venv/bin/baton" agents)"
for shipped in "$root"/agents/*.md; do
  name="$(basename "$shipped" .md)"
  if ! grep -q "$name" <<< "$agents"; then
    echo "the installed baton does not list the shipped agent $name:" >&2
    echo "$agents" >&2
    exit 1
  fi
done
"$work/venv/bin/python" - "$work/state/check.db" <<'PY'
import asyncio
import sys

import sqlalchemy

from bot.store import Database


async def main(path: str) -> None:
    database = Database(f"sqlite:///{path}")
    await database.create_schema()
    await database.close()
    tables = set(sqlalchemy.inspect(sqlalchemy.create_engine(f"sqlite:///{path}")).get_table_names())
    missing = {"sessions", "tasks", "thread_messages", "thread_branches"} - tables
    assert not missing, f"the installed migrations made no {sorted(missing)}"


asyncio.run(main(sys.argv[1]))
PY
echo "wheel: installed outside the checkout, baton runs, shipped agents and migrations included"
