# shellcheck shell=bash
# Sourced by .ci/run: a throwaway PostgreSQL cluster for plansmith-store's tests.
#
# Installs Debian's PostgreSQL if no initdb is found, initialises a cluster in a temporary
# directory as the unprivileged `postgres` user (CI runs as root; initdb refuses root), starts
# it on a free loopback port, exports PLANSMITH_TEST_POSTGRES_URL for the tests, and registers
# its shutdown with `ci_on_exit`. Under CI=true the store tests fail when that URL is missing.

ci_pg_find() {
  ci_pg_bin=""
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then ci_pg_bin="$dir"; fi
  done
}

ci_pg_find
if [ -z "$ci_pg_bin" ]; then
  echo "ci: postgres: installing postgresql"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  ci_pg_find
fi
if [ -z "$ci_pg_bin" ]; then
  echo "ci: postgres: no initdb found after installing postgresql" >&2
  return 1
fi

if ! id -u postgres >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin postgres
fi

ci_pg_dir=$(mktemp -d /tmp/plansmith-pg.XXXXXX)
chown postgres: "$ci_pg_dir"
chmod 700 "$ci_pg_dir"

# First free port from 55432 on (bash's /dev/tcp connects only when something listens).
ci_pg_port=55432
while (exec 3<>"/dev/tcp/127.0.0.1/$ci_pg_port") 2>/dev/null; do
  ci_pg_port=$((ci_pg_port + 1))
done

runuser -u postgres -- "$ci_pg_bin/initdb" -D "$ci_pg_dir/data" -U postgres -A trust \
  --no-sync -E UTF8 >"$ci_pg_dir/initdb.log" 2>&1 || {
  cat "$ci_pg_dir/initdb.log" >&2
  return 1
}
ci_on_exit "runuser -u postgres -- '$ci_pg_bin/pg_ctl' -D '$ci_pg_dir/data' -m fast -w stop >/dev/null 2>&1; rm -rf '$ci_pg_dir'"
runuser -u postgres -- "$ci_pg_bin/pg_ctl" -D "$ci_pg_dir/data" -l "$ci_pg_dir/server.log" -w \
  -o "-p $ci_pg_port -k $ci_pg_dir -c listen_addresses=127.0.0.1 -c max_connections=300" \
  start >/dev/null || {
  cat "$ci_pg_dir/server.log" >&2
  return 1
}
export PLANSMITH_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$ci_pg_port/postgres"
echo "ci: postgres: $("$ci_pg_bin/postgres" --version) on 127.0.0.1:$ci_pg_port ($ci_pg_dir)"
