#!/usr/bin/env bash
# Installs what the tests and the demo need when it is missing, on Debian
# (or Ubuntu) as root; elsewhere, says exactly what to install and fails.
# Used by `make test`, `make demo` and .ci/run. Idempotent and quiet when
# everything is there. It never stops what was running before it: a
# PostgreSQL cluster or pgbouncer service already in use stays up; only one
# that the installation itself started is stopped again.
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
# Keeps the packages' services from starting during the installation (a test
# points it elsewhere).
POLICY_RC=${SYNCGUARD_POLICY_RC:-/usr/sbin/policy-rc.d}
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

# What is running before the installation is left running: only a service
# that the installation itself started (a package's default cluster or its
# pgbouncer, should policy-rc.d not have held them back) is stopped again.
online_clusters() { # "15/main" for every cluster pg_lsclusters reports online
  command -v pg_lsclusters >/dev/null 2>&1 || return 0
  pg_lsclusters -h 2>/dev/null | awk '$4 ~ /^online/ { print $1 "/" $2 }' || true
}
pgbouncer_service_running() { # the packaged service only, not a test's own pgbouncer
  service pgbouncer status >/dev/null 2>&1
}

if [ ${#packages[@]} -gt 0 ]; then
  echo "syncguard: installing ${packages[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  clusters_before=$(online_clusters)
  pgbouncer_before=
  pgbouncer_service_running && pgbouncer_before=1
  # The packages' own services must not start: the tests run their own
  # servers as the postgres user on free ports.
  policy=
  if [ ! -e "$POLICY_RC" ]; then
    printf '#!/bin/sh\nexit 101\n' > "$POLICY_RC"
    chmod 755 "$POLICY_RC"
    policy=1
  fi
  trap '[ -z "$policy" ] || rm -f "$POLICY_RC"' EXIT
  apt-get update -q >/dev/null
  apt-get install -y -q "${packages[@]}" >/dev/null
  for c in $(online_clusters); do
    case $'\n'"$clusters_before"$'\n' in
      *$'\n'"$c"$'\n'*) ;; # was running before: not ours to stop
      *) echo "syncguard: stopping cluster $c, started by the installation" >&2
         pg_ctlcluster "${c%%/*}" "${c#*/}" stop >/dev/null 2>&1 || true ;;
    esac
  done
  if [ -z "$pgbouncer_before" ] && pgbouncer_service_running; then
    echo "syncguard: stopping the pgbouncer service, started by the installation" >&2
    service pgbouncer stop >/dev/null 2>&1 || true
  fi
fi
[ -z "$need_user" ] || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
exit 0
