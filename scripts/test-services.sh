#!/usr/bin/env bash
# Services some tests use, on this machine only: Debian's chromium (the report's browser test)
# and a PostgreSQL server on 127.0.0.1:5433 (the multi-worker study test). Needs root to
# install; writes the server's URL to /tmp/dse-test-services.env. Safe to run twice.
set -u
need=""
command -v chromium >/dev/null 2>&1 || need="$need chromium fonts-dejavu-core"
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need="$need postgresql"
if [ -n "$need" ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "test-services: not root, cannot install:$need" >&2
  else
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $need) >/tmp/dse-test-services.log 2>&1 \
      || echo "test-services: apt-get install$need failed (see /tmp/dse-test-services.log)" >&2
  fi
fi
PGBIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
if [ -z "$PGBIN" ] || [ "$(id -u)" -ne 0 ]; then
  exit 0
fi
DATA=/tmp/dse-pg
PORT=5433
if ! "$PGBIN/pg_isready" -h 127.0.0.1 -p $PORT >/dev/null 2>&1; then
  rm -rf "$DATA" && mkdir -p "$DATA" && chown postgres "$DATA"
  su postgres -s /bin/sh -c "$PGBIN/initdb -D $DATA -A trust -U postgres" >/dev/null
  su postgres -s /bin/sh -c "$PGBIN/pg_ctl -D $DATA -o '-h 127.0.0.1 -p $PORT -k /tmp -c max_connections=200' -l $DATA/server.log -w start" >/dev/null
fi
psql -h 127.0.0.1 -p $PORT -U postgres -tc "select 1 from pg_database where datname='dse_test'" | grep -q 1 \
  || psql -h 127.0.0.1 -p $PORT -U postgres -c "create database dse_test" >/dev/null
echo "export DSE_TEST_POSTGRES_URL=postgresql://postgres@127.0.0.1:$PORT/dse_test" > /tmp/dse-test-services.env
echo "test-services: chromium $(command -v chromium || echo missing); PostgreSQL on 127.0.0.1:$PORT"
