#!/usr/bin/env bash
# Best effort: a local PostgreSQL for tests/store/test_postgres.py. Prints the URL to
# use on its last line, or nothing when no server can be had (those tests then skip).
set -u
log=$(mktemp)
have_server() { ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; }
if ! have_server && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "ci: installing PostgreSQL for the PostgreSQL tests" >&2
  timeout 300 apt-get update -qq >"$log" 2>&1
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq postgresql >>"$log" 2>&1
fi
if ! have_server; then
  echo "ci: no PostgreSQL server; its tests will be skipped" >&2
  exit 0
fi
version=$(ls /usr/lib/postgresql | sort -n | tail -1)
if ! pg_lsclusters -h 2>/dev/null | grep -q .; then
  pg_createcluster "$version" main >>"$log" 2>&1
fi
cluster=$(pg_lsclusters -h | head -1 | awk '{print $1" "$2}')
pg_ctlcluster $cluster start >>"$log" 2>&1 || true
port=$(pg_lsclusters -h | head -1 | awk '{print $3}')
for _ in $(seq 30); do
  su postgres -c "psql -p $port -tAc 'select 1'" >/dev/null 2>&1 && break
  sleep 1
done
su postgres -c "psql -p $port -tAc \"select 1 from pg_roles where rolname='baton_ci'\"" 2>/dev/null | grep -q 1 \
  || su postgres -c "psql -p $port -c \"create role baton_ci login superuser password 'baton_ci'\"" >>"$log" 2>&1
if su postgres -c "psql -p $port -tAc 'select 1'" >/dev/null 2>&1; then
  echo "postgresql://baton_ci:baton_ci@127.0.0.1:$port/postgres"
else
  echo "ci: PostgreSQL did not start; its tests will be skipped" >&2
  cat "$log" >&2
fi
