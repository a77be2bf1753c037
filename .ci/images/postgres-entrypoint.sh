#!/bin/sh
# The official image's first start, in short: a cluster owned by POSTGRES_USER with
# POSTGRES_PASSWORD, a database POSTGRES_DB, and password logins over the network.
set -eu
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  printf '%s\n' "$POSTGRES_PASSWORD" > /tmp/password
  initdb --pgdata="$PGDATA" --username="$POSTGRES_USER" --pwfile=/tmp/password \
    --auth-local=trust --auth-host=scram-sha-256 > /dev/null
  rm /tmp/password
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl --pgdata="$PGDATA" --options="-c listen_addresses=''" --wait start > /dev/null
  createdb --username="$POSTGRES_USER" "$POSTGRES_DB"
  pg_ctl --pgdata="$PGDATA" --mode=fast --wait stop > /dev/null
fi
exec postgres -c listen_addresses='*'
