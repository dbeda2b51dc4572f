#!/usr/bin/env bash
# ensure-pgbouncer.sh runs a PgBouncer in transaction mode in front of a PostgreSQL
# server and prints the server's URL rewritten to go through it as the last line of
# stdout (all progress goes to stderr), so callers can write:
#
#   POOLED_URL=$(scripts/ensure-pgbouncer.sh "$PGRUN_DATABASE_URL")
#
# The upstream is the URL given as $1, else $PGRUN_DATABASE_URL, else
# scripts/ensure-postgres.sh's. It installs Debian's pgbouncer with apt-get if it is
# missing, writes its configuration under $PGRUN_PGBOUNCER_DIR (default a directory in
# /tmp named for the upstream, so that user postgres can reach it), and starts it as
# user postgres when run as root (pgbouncer refuses to run as root), listening on
# 127.0.0.1 on the first free port from $PGRUN_PGBOUNCER_PORT (default 16432). A
# second call with a running pooler for the same upstream only prints its URL.
#
# The pooler is what the tests need, not a production setup: pool_mode = transaction,
# a wildcard database (every database of the upstream, so per-test databases work),
# auth_type = trust for the users in its auth_file (the upstream URL's user and
# pgtestdb's pgtdbuser, with their passwords, which pgbouncer passes on to the server).
# Stop it with: kill $(cat "$PGRUN_PGBOUNCER_DIR/pgbouncer.pid").
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "ensure-pgbouncer: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
is_root() { [ "$(id -u)" -eq 0 ]; }

upstream=${1:-${PGRUN_DATABASE_URL:-}}
[ -n "$upstream" ] || upstream=$("$here/ensure-postgres.sh" | tail -n 1)
case $upstream in
postgres://* | postgresql://*) ;;
*) die "the upstream must be a postgres:// URL, got: $upstream" ;;
esac
psql "$upstream" -XAtqc 'select 1' >/dev/null 2>&1 || die "the upstream $upstream does not answer"

. "$here/lib/install.sh" # apt_install, PGRUN_NO_INSTALL
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  log "installing pgbouncer (apt-get)"
  apt_install pgbouncer
fi
PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)

# The URL's parts: scheme://[user[:password]@]host[:port]/database[?query]. The server
# itself says where it listens, which also covers a URL that names a socket.
re='^(postgres(ql)?)://(([^:@/]*)(:([^@/]*))?@)?([^/?]*)(/([^?]*))?(\?(.*))?$'
[[ $upstream =~ $re ]] || die "cannot read the upstream URL $upstream"
user=${BASH_REMATCH[4]}
password=${BASH_REMATCH[6]}
database=${BASH_REMATCH[9]:-postgres}
query=${BASH_REMATCH[11]}
[ -n "$user" ] || user=$(psql "$upstream" -XAtqc 'select current_user')
read -r srv_host srv_port < <(psql "$upstream" -XAtqF ' ' -c \
  "select coalesce(host(inet_server_addr()), '127.0.0.1'), current_setting('port')")

dir=${PGRUN_PGBOUNCER_DIR:-/tmp/pgrun-pgbouncer-$(printf '%s' "$srv_host:$srv_port" | cksum | cut -d' ' -f1)}
mkdir -p "$dir"
as_owner() { if is_root; then runuser -u postgres -- "$@"; else "$@"; fi; }
if is_root; then
  id postgres >/dev/null 2>&1 || die "user postgres is missing (pgbouncer runs as it, since it refuses root)"
  chown postgres "$dir"
fi
chmod 700 "$dir"
# One caller at a time sets the pooler up (parallel test processes).
if command -v flock >/dev/null 2>&1; then
  exec 9>>"$dir/.lock"
  flock 9
fi

# pooled_url prints the upstream URL with its host and port replaced by the pooler's.
pooled_url() { # port
  local auth=
  [ -n "${BASH_REMATCH[3]:-}" ] && auth=${BASH_REMATCH[3]}
  echo "${BASH_REMATCH[1]}://${auth}127.0.0.1:$1/$database${query:+?$query}"
}

# A pooler of ours that answers: reuse it.
if [ -f "$dir/pgbouncer.pid" ] && [ -f "$dir/port" ] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null; then
  url=$(pooled_url "$(cat "$dir/port")")
  if PGCONNECT_TIMEOUT=3 psql "$url" -XAtqc 'select 1' >/dev/null 2>&1; then
    echo "$url"
    exit 0
  fi
  log "the pooler in $dir does not answer; restarting it"
  kill "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null || break; sleep 0.1; done
fi

# auth_file: trust still wants the user listed; the password is what pgbouncer sends
# the server if that asks for one.
quote() { printf '"%s"' "${1//\"/\"\"}"; }
{
  echo "$(quote "$user") $(quote "$password")"
  [ "$user" = pgtdbuser ] || echo '"pgtdbuser" "pgtdbpass"'
} >"$dir/userlist.txt"

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
port=${PGRUN_PGBOUNCER_PORT:-16432}
for _ in $(seq 1 100); do
  port_free "$port" && break
  port=$((port + 1))
done
port_free "$port" || die "no free port from ${PGRUN_PGBOUNCER_PORT:-16432} to $port"

cat >"$dir/pgbouncer.ini" <<EOF
; written by scripts/ensure-pgbouncer.sh: a test pooler in transaction mode
[databases]
* = host=$srv_host port=$srv_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 20
; per-test databases come and go: forget their pools soon after
autodb_idle_timeout = 30
server_idle_timeout = 30
ignore_startup_parameters = extra_float_digits
; every test connects and disconnects: keep the log to what goes wrong
log_connections = 0
log_disconnections = 0
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
EOF
echo "$port" >"$dir/port"
if is_root; then chown postgres "$dir"/*; fi

log "starting pgbouncer (transaction mode) on 127.0.0.1:$port for $srv_host:$srv_port; files in $dir"
# The daemon keeps none of our descriptors: not the lock (fd 9), not our caller's
# stdout and stderr (a caller that reads them to the end, a test's exec, would wait for
# pgbouncer to exit), and nothing else the caller held open (a lock taken with flock
# around `make test` stayed held for as long as a leftover pgbouncer lived).
# without_inherited_fds runs its command with only 0, 1 and 2 open.
without_inherited_fds() {
  (
    for fd in /proc/self/fd/*; do
      fd=${fd##*/}
      case $fd in 0 | 1 | 2) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
    done
    "$@"
  )
}
if ! without_inherited_fds as_owner "$PGBOUNCER" -d "$dir/pgbouncer.ini" </dev/null >"$dir/start.out" 2>&1; then
  cat "$dir/start.out" >&2
  tail -n 20 "$dir/pgbouncer.log" >&2 || true
  die "pgbouncer did not start; see $dir/pgbouncer.log"
fi
url=$(pooled_url "$port")
for _ in $(seq 1 50); do
  if PGCONNECT_TIMEOUT=3 psql "$url" -XAtqc 'select 1' >/dev/null 2>&1; then
    echo "$url"
    exit 0
  fi
  sleep 0.2
done
tail -n 20 "$dir/pgbouncer.log" >&2 || true
die "pgbouncer on 127.0.0.1:$port does not answer; see $dir/pgbouncer.log"
