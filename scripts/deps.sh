#!/usr/bin/env bash
# Installs what the tests and the demo need when it is missing, on Debian
# (or Ubuntu) as root; elsewhere, says exactly what to install and fails.
# Used by `make test`, `make demo` and .ci/run. Idempotent and quiet when
# everything is there.
#
#   scripts/deps.sh            # what make test needs
#   scripts/deps.sh demo       # what make demo needs (PostgreSQL only)
#
# Needed: PostgreSQL 15 server binaries (initdb, postgres, pg_ctl) and psql,
# PgBouncer (pooler tests), a `postgres` system user (initdb refuses root), and
# Go (go.mod's `go` line or newer).
set -euo pipefail

what=${1:-test}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
packages=()

have_pg_server() { [ -x "$PGBIN/initdb" ] || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; }
have_pgbouncer() { [ -x /usr/sbin/pgbouncer ] || command -v pgbouncer >/dev/null; }

have_pg_server || packages+=(postgresql-15)
command -v psql >/dev/null || packages+=(postgresql-client-15)
if [ "$what" = test ]; then
  have_pgbouncer || packages+=(pgbouncer)
fi
# Extra packages a test suite asks for (e.g. the HA suite).
for p in ${SYNCGUARD_EXTRA_PACKAGES:-}; do
  dpkg -s "$p" >/dev/null 2>&1 || packages+=("$p")
done

need_user=
id postgres >/dev/null 2>&1 || need_user=1

if [ ${#packages[@]} -eq 0 ] && [ -z "$need_user" ]; then
  exit 0
fi

if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  {
    echo "syncguard: missing for 'make $what':"
    [ ${#packages[@]} -eq 0 ] || echo "  Debian/Ubuntu packages: ${packages[*]}"
    [ -z "$need_user" ] || echo "  a 'postgres' system user (initdb refuses to run as root)"
    echo "Install them as root, e.g.:"
    [ ${#packages[@]} -eq 0 ] || echo "  apt-get update && apt-get install -y ${packages[*]}"
    [ -z "$need_user" ] || echo "  useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres"
    echo "Elsewhere: PostgreSQL 15 server binaries on PATH or in /usr/lib/postgresql/15/bin, and PgBouncer;"
    echo "or point the tests at an existing server with SYNCGUARD_TEST_DSN."
  } >&2
  exit 1
fi

if [ ${#packages[@]} -gt 0 ]; then
  echo "syncguard: installing ${packages[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # The packages' own services must not start: the tests run their own
  # servers as the postgres user on free ports.
  policy=
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod 755 /usr/sbin/policy-rc.d
    policy=1
  fi
  trap '[ -z "$policy" ] || rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get update -q >/dev/null
  apt-get install -y -q "${packages[@]}" >/dev/null
  # In case a default cluster or pgbouncer started anyway.
  pg_ctlcluster 15 main stop >/dev/null 2>&1 || true
  service pgbouncer stop >/dev/null 2>&1 || true
fi
[ -z "$need_user" ] || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
exit 0
