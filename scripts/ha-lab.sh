#!/usr/bin/env bash
# ha-lab.sh runs a PostgreSQL high-availability stack on this machine, from Debian's
# packages, for pgrun's HA test (tests/ha_test.go) and for a person trying faults by
# hand (docs/high-availability.md):
#
#   scripts/ha-lab.sh up [--async]   start it (or finish starting it); the last line
#                                    of stdout is a URL to the primary through HAProxy
#   scripts/ha-lab.sh down           remove everything it made
#   scripts/ha-lab.sh status         patronictl list, and who is primary
#   scripts/ha-lab.sh urls           the HAProxy URL, then the multi-host URL
#
# Faults (each waits out its own duration, then restores, and says what it did):
#
#   kill-primary               kill -9 the primary's postmaster (Patroni fails over)
#   switchover                 patronictl switchover to a healthy standby
#   isolate NODE SECONDS       cut NODE (pg1..pg3, etcd, proxy, r1, r2) off the bridge
#   cut NODE / heal NODE       the same, without the wait
#   etcd-stop SECONDS          kill etcd, start it again after SECONDS
#   slow NODE DELAY LOSS       e.g. slow r1 50ms 1%: delay (netem) and loss on NODE's link
#   slow-off NODE              undo slow
#   exec NODE CMD...           run CMD inside NODE's network namespace
#
# The layout: a bridge pgrunha0 with 10.77.0.1/24 on the host side, and one network
# namespace per machine, each joined to the bridge by a veth pair: etcd 10.77.0.2
# (one member), HAProxy 10.77.0.3 (read-write port 5000, routed by Patroni's REST check
# GET /primary on 8008; read-only port 5001 by GET /replica; stats on 7000),
# PostgreSQL 15 under Patroni on pg1 10.77.0.11, pg2 .12 and pg3 .13 (port 5432, REST
# 8008), and runner hosts r1 .21 and r2 .22 (nothing runs there until a caller starts
# something with exec). The host reaches every address through the bridge, so a test
# on the host can use them all. Cutting a machine off is taking its veth's host end
# down: its packets go nowhere, as in a partition, and nobody is told.
#
# Patroni: scope pgrun-ha, ttl 10, loop_wait 2, retry_timeout 4 (the least that
# Patroni accepts for ttl 10: loop_wait + 2 * retry_timeout <= ttl), so a dead primary
# is replaced in about ten seconds; synchronous_mode on (off with --async; up switches
# a running lab to what it is given); failsafe_mode on, so that an etcd outage alone
# does not demote a primary every member can still reach (docs/high-availability.md;
# PGRUN_HA_FAILSAFE=off turns it off, to see the difference); primary_start_timeout 0,
# so that a primary whose postmaster dies is failed over at once rather than
# restarted in place (Patroni's default, 300 s, restarts it: a server restart for pgrun).
# Authentication is trust for the lab's subnet: it is a lab on private addresses in
# namespaces of this machine, not a deployment. fsync is off (the faults are process
# kills and partitions, not power cuts; the kernel keeps the written pages).
#
# State lives in $PGRUN_HA_DIR (default /tmp/pgrun-ha, reachable by user postgres):
# data directories, configurations, logs and pid files. Packages it installs with
# apt-get when missing (patroni, etcd-server, etcd-client, haproxy, iproute2,
# iptables, curl, postgresql-client, postgresql-15; PGRUN_NO_INSTALL=1 names them and
# stops instead), with the Debian services they ship kept from starting
# (policy-rc.d, and stopped and masked where systemd runs). It
# needs root (namespaces, veths, running postgres as user postgres). Every wait has a
# deadline and says what it waited for when it gives up.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "ha-lab: $*" >&2; }
die() {
  log "ERROR: $*"
  exit 1
}

lab=${PGRUN_HA_DIR:-/tmp/pgrun-ha}
net=10.77.0
bridge=pgrunha0
scope=pgrun-ha
pgbin=/usr/lib/postgresql/15/bin
nodes="pg1 pg2 pg3"
machines="etcd proxy pg1 pg2 pg3 r1 r2"
pyjson=/usr/bin/python3 # Debian's, which patronictl uses too
failsafe=true
case ${PGRUN_HA_FAILSAFE:-on} in
on) ;;
off) failsafe=false ;;
*) die "PGRUN_HA_FAILSAFE is on or off, not '$PGRUN_HA_FAILSAFE'" ;;
esac

ip_of() { # machine
  case $1 in
  etcd) echo "$net.2" ;;
  proxy) echo "$net.3" ;;
  pg1) echo "$net.11" ;;
  pg2) echo "$net.12" ;;
  pg3) echo "$net.13" ;;
  r1) echo "$net.21" ;;
  r2) echo "$net.22" ;;
  *) die "no machine named '$1' in the lab: give one of $machines" ;;
  esac
}
ns_of() { ip_of "$1" >/dev/null && echo "pgrunha-$1"; }
veth_of() { echo "pha-$1"; } # the host end; the namespace end is eth0

haproxy_url="postgres://postgres@$net.3:5000/postgres?sslmode=disable"
multihost_url="postgres://postgres@$net.11:5432,$net.12:5432,$net.13:5432/postgres?sslmode=disable&target_session_attrs=read-write&connect_timeout=3"

# wait_for waits up to SECONDS for CMD to succeed, polling every 0.2 s; on timeout it
# dies naming WHAT it waited for and pointing at the logs.
wait_for() { # seconds what cmd...
  local limit=$1 what=$2
  local deadline=$((SECONDS + limit))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      die "gave up after ${limit}s waiting for $what; logs in $lab/*.log"
    fi
    sleep 0.2
  done
}

need_root() { [ "$(id -u)" -eq 0 ] || die "the lab needs root (network namespaces, running postgres as user postgres); run it as root"; }

# install_missing installs the packages the lab needs, keeping their services from
# starting: a machine with systemd would start etcd, haproxy and patroni at install.
install_missing() {
  local missing=()
  command -v patroni >/dev/null 2>&1 || missing+=(patroni)
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
  command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  command -v iptables >/dev/null 2>&1 || missing+=(iptables)
  command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  [ -x "$pgbin/postgres" ] || missing+=(postgresql-15)
  [ ${#missing[@]} -eq 0 ] && return
  log "installing ${missing[*]} (apt-get), with their services kept from starting"
  # shellcheck source-path=SCRIPTDIR source=lib/install.sh
  . "$here/lib/install.sh"
  local policy=/usr/sbin/policy-rc.d made=""
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy"
    chmod +x "$policy"
    made=1
    trap 'rm -f /usr/sbin/policy-rc.d' EXIT # also if the install fails
  fi
  apt_install "${missing[@]}"
  if [ -n "$made" ]; then
    rm -f "$policy"
    trap - EXIT
  fi
  # Where systemd runs, the packages' own units must not hold the ports or the DCS.
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    for unit in etcd haproxy patroni; do
      systemctl stop "$unit.service" >/dev/null 2>&1 || true
      systemctl mask "$unit.service" >/dev/null 2>&1 || true
    done
  fi
}

# --- network ------------------------------------------------------------------------

net_up() {
  if ! ip link show "$bridge" >/dev/null 2>&1; then
    ip link add "$bridge" type bridge
  fi
  ip addr replace "$net.1/24" dev "$bridge"
  ip link set "$bridge" up
  local m ns veth
  for m in $machines; do
    ns=$(ns_of "$m")
    veth=$(veth_of "$m")
    ip netns list | grep -qx "$ns\( .*\)\?" || ip netns add "$ns"
    if ! ip link show "$veth" >/dev/null 2>&1; then
      ip -n "$ns" link del eth0 >/dev/null 2>&1 || true
      ip link add "$veth" type veth peer name "phb-$m"
      ip link set "phb-$m" netns "$ns"
      ip -n "$ns" link set "phb-$m" name eth0
    fi
    ip link set "$veth" master "$bridge"
    ip link set "$veth" up
    ip -n "$ns" addr replace "$(ip_of "$m")/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
  done
}

net_down() {
  local m ns
  for m in $machines; do
    ns=$(ns_of "$m")
    ip link del "$(veth_of "$m")" >/dev/null 2>&1 || true
    ip netns del "$ns" >/dev/null 2>&1 || true
  done
  ip link del "$bridge" >/dev/null 2>&1 || true
}

# --- processes ----------------------------------------------------------------------

# alive says whether the process named in pid file NAME.pid runs.
alive() { [ -s "$lab/$1.pid" ] && kill -0 "$(cat "$lab/$1.pid")" 2>/dev/null; }

# start runs CMD in MACHINE's namespace in a session of its own, as USER, logging to
# $lab/NAME.log, unless NAME already runs.
start() { # name machine user cmd...
  local name=$1 m=$2 user=$3
  shift 3
  alive "$name" && return
  local pre=()
  [ "$user" = root ] || pre=(runuser -u "$user" --)
  ip netns exec "$(ns_of "$m")" setsid "${pre[@]}" "$@" >>"$lab/$name.log" 2>&1 </dev/null &
  echo $! >"$lab/$name.pid"
}

# kill_ns ends every process inside the lab's namespaces: those it started and any
# child they left (postgres under Patroni, runners started with exec).
kill_ns() {
  local m pids
  for m in $machines; do
    pids=$(ip netns pids "$(ns_of "$m")" 2>/dev/null || true)
    # shellcheck disable=SC2086 # one pid a word
    [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  done
}

write_configs() {
  mkdir -p "$lab"
  local sync=$1 n
  cat >"$lab/patronictl.yml" <<EOF
scope: $scope
etcd3:
  host: $(ip_of etcd):2379
EOF
  for n in $nodes; do
    mkdir -p "$lab/$n"
    cat >"$lab/$n/patroni.yml" <<EOF
scope: $scope
name: $n
log:
  level: INFO
restapi:
  listen: $(ip_of "$n"):8008
  connect_address: $(ip_of "$n"):8008
etcd3:
  host: $(ip_of etcd):2379
bootstrap:
  dcs:
    ttl: 10
    loop_wait: 2
    retry_timeout: 4
    maximum_lag_on_failover: 1048576
    synchronous_mode: $sync
    failsafe_mode: $failsafe
    primary_start_timeout: 0
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        wal_level: replica
        hot_standby: "on"
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        max_connections: 200
        wal_sender_timeout: 5s
        wal_receiver_timeout: 5s
  initdb:
    - encoding: UTF8
    - auth: trust
  pg_hba:
    - local all all trust
    - host replication all $net.0/24 trust
    - host all all $net.0/24 trust
postgresql:
  listen: $(ip_of "$n"):5432
  connect_address: $(ip_of "$n"):5432
  data_dir: $lab/$n/data
  bin_dir: $pgbin
  pgpass: $lab/$n/pgpass
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
    rewind:
      username: postgres
  parameters:
    unix_socket_directories: $lab/$n
    fsync: "off"
    tcp_keepalives_idle: 5
    tcp_keepalives_interval: 2
    tcp_keepalives_count: 3
tags:
  nofailover: false
  noloadbalance: false
EOF
  done
  {
    cat <<EOF
global
  maxconn 2000
defaults
  mode tcp
  retries 2
  timeout connect 2s
  timeout client 30m
  timeout server 30m
  timeout check 2s
listen stats
  mode http
  bind $(ip_of proxy):7000
  stats enable
  stats uri /
listen primary
  bind $(ip_of proxy):5000
  option httpchk GET /primary
  http-check expect status 200
  default-server inter 1s fall 2 rise 1 on-marked-down shutdown-sessions
EOF
    for n in $nodes; do echo "  server $n $(ip_of "$n"):5432 check port 8008"; done
    cat <<EOF
listen replicas
  bind $(ip_of proxy):5001
  option httpchk GET /replica
  http-check expect status 200
  default-server inter 1s fall 2 rise 1 on-marked-down shutdown-sessions
EOF
    for n in $nodes; do echo "  server $n $(ip_of "$n"):5432 check port 8008"; done
  } >"$lab/haproxy.cfg"
}

# cluster_json prints Patroni's view of the cluster (GET /cluster on any member).
cluster_json() {
  local n
  for n in $nodes; do
    curl -fsS --max-time 2 "http://$(ip_of "$n"):8008/cluster" 2>/dev/null && return 0
  done
  return 1
}

# members prints one line per member, "name role state lag timeline".
members() {
  cluster_json | "$pyjson" -c '
import json, sys
for m in json.load(sys.stdin)["members"]:
    print(m["name"], m["role"], m["state"], m.get("lag", 0), m.get("timeline", 0))'
}

primary() { members | awk '$2 == "leader" && $3 == "running" { print $1 }'; }

# healthy: a running leader and two streaming replicas, one of them the synchronous
# standby in sync mode.
healthy() { # sync
  local out
  out=$(members) || return 1
  echo "$out" | awk '$2 == "leader" && $3 == "running"' | grep -q . || return 1
  [ "$(echo "$out" | awk '$2 != "leader" && ($3 == "streaming" || $3 == "running")' | wc -l)" -eq 2 ] || return 1
  if [ "$1" = true ]; then
    echo "$out" | awk '$2 == "sync_standby"' | grep -q . || return 1
  fi
}

proxy_ok() { psql -XAtq "$haproxy_url&connect_timeout=2" -c 'select not pg_is_in_recovery()' 2>/dev/null | grep -qx t; }
etcd_ok() { etcdctl --endpoints "http://$(ip_of etcd):2379" --dial-timeout 1s endpoint health >/dev/null 2>&1; }

start_etcd() {
  start etcd etcd root etcd --name e1 --data-dir "$lab/etcd" \
    --listen-client-urls "http://$(ip_of etcd):2379" --advertise-client-urls "http://$(ip_of etcd):2379" \
    --listen-peer-urls "http://$(ip_of etcd):2380" --initial-advertise-peer-urls "http://$(ip_of etcd):2380" \
    --initial-cluster "e1=http://$(ip_of etcd):2380" --initial-cluster-state new
  wait_for 30 "etcd to answer on $(ip_of etcd):2379" etcd_ok
}

cmd_up() {
  local sync=true
  case ${1:-} in
  --async) sync=false ;;
  "") ;;
  *) die "up takes --async or nothing, not '$1'" ;;
  esac
  need_root
  install_missing
  [ -x "$pgbin/postgres" ] || die "no PostgreSQL 15 in $pgbin (apt-get install postgresql-15)"
  mkdir -p "$lab"
  chown postgres: "$lab"
  chmod 0755 "$lab"
  write_configs "$sync"
  for n in $nodes; do chown -R postgres: "$lab/$n"; done
  net_up
  start_etcd
  for n in $nodes; do
    start "patroni-$n" "$n" postgres patroni "$lab/$n/patroni.yml"
  done
  start haproxy proxy root "$(command -v haproxy || echo /usr/sbin/haproxy)" -db -f "$lab/haproxy.cfg"
  log "waiting for Patroni to elect a primary and stream to two standbys (up to 120 s)"
  wait_for 120 "a Patroni leader and two streaming replicas (patronictl -c $lab/patronictl.yml list)" healthy false
  # The mode of a running cluster is in the DCS, not in the bootstrap section.
  patronictl -c "$lab/patronictl.yml" edit-config --force --quiet \
    --set "synchronous_mode=$sync" --set "failsafe_mode=$failsafe" --set primary_start_timeout=0 >/dev/null
  wait_for 60 "the cluster to settle in synchronous_mode=$sync" healthy "$sync"
  wait_for 30 "HAProxy to route $(ip_of proxy):5000 to the primary" proxy_ok
  log "primary $(primary); synchronous_mode=$sync failsafe_mode=$failsafe; logs in $lab"
  echo "$haproxy_url"
}

cmd_down() {
  need_root
  kill_ns
  net_down
  local f
  for f in "$lab"/*.pid; do
    [ -e "$f" ] || continue
    kill -9 "$(cat "$f")" 2>/dev/null || true
  done
  rm -rf "$lab"
  log "down: namespaces, veths, bridge $bridge and $lab removed"
}

cmd_status() {
  patronictl -c "$lab/patronictl.yml" list
  echo "primary: $(primary || echo none)"
}

cmd_urls() {
  echo "$haproxy_url"
  echo "$multihost_url"
}

cmd_kill_primary() {
  local p pid
  p=$(primary) || true
  [ -n "$p" ] || die "no running primary to kill"
  pid=$(head -n 1 "$lab/$p/data/postmaster.pid")
  kill -9 "$pid"
  log "killed the postmaster of $p (pid $pid) with SIGKILL"
  echo "$p"
}

cmd_switchover() {
  local p c
  p=$(primary) || true
  [ -n "$p" ] || die "no running primary to switch over from"
  c=$(members | awk -v p="$p" '$1 != p && ($2 == "sync_standby" || $2 == "replica") && ($3 == "streaming" || $3 == "running") { print $2, $1 }' | sort -r | head -n 1 | cut -d' ' -f2)
  [ -n "$c" ] || die "no streaming standby to switch over to"
  patronictl -c "$lab/patronictl.yml" switchover --leader "$p" --candidate "$c" --force >&2
  log "switchover from $p to $c asked"
  echo "$c"
}

cmd_cut() { ip link set "$(veth_of "$1")" down && log "$1 ($(ip_of "$1")) cut off"; }
cmd_heal() { ip link set "$(veth_of "$1")" up && log "$1 ($(ip_of "$1")) back on the network"; }

cmd_isolate() { # machine seconds
  [ $# -eq 2 ] || die "usage: isolate MACHINE SECONDS"
  ip_of "$1" >/dev/null
  cmd_cut "$1"
  trap 'cmd_heal "$1"' EXIT
  sleep "$2"
}

cmd_etcd_stop() { # seconds
  [ $# -eq 1 ] || die "usage: etcd-stop SECONDS"
  alive etcd || die "etcd is not running"
  kill -9 "$(cat "$lab/etcd.pid")"
  log "etcd killed; starting it again in $1 s"
  sleep "$1"
  start_etcd
  log "etcd back"
}

# slow adds DELAY and LOSS to MACHINE's packets: delay with netem where the kernel has
# it, loss with iptables' statistic match (which needs no netem).
cmd_slow() { # machine delay loss
  [ $# -eq 3 ] || die "usage: slow MACHINE DELAY LOSS, e.g. slow r1 50ms 1%"
  local ns p
  ns=$(ns_of "$1")
  cmd_slow_off "$1"
  if [ "$2" != 0 ] && [ "$2" != 0ms ]; then
    ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "$2" 2>/dev/null ||
      die "this kernel has no netem (CONFIG_NET_SCH_NETEM), so the lab cannot add delay on a link; tests/ha_test.go delays through a proxy of its own instead"
  fi
  p=$(awk -v l="${3%\%}" 'BEGIN { printf "%.4f", l / 100 }')
  ip netns exec "$ns" iptables -A OUTPUT -m statistic --mode random --probability "$p" -j DROP
  ip netns exec "$ns" iptables -A INPUT -m statistic --mode random --probability "$p" -j DROP
  log "$1: delay $2, loss $3 each way"
}

cmd_slow_off() {
  local ns
  ns=$(ns_of "$1")
  ip netns exec "$ns" tc qdisc del dev eth0 root >/dev/null 2>&1 || true
  ip netns exec "$ns" iptables -F INPUT >/dev/null 2>&1 || true
  ip netns exec "$ns" iptables -F OUTPUT >/dev/null 2>&1 || true
}

cmd_exec() {
  [ $# -ge 2 ] || die "usage: exec MACHINE CMD..."
  local ns
  ns=$(ns_of "$1")
  shift
  exec ip netns exec "$ns" "$@"
}

case ${1:-} in
up) shift && cmd_up "$@" ;;
down) cmd_down ;;
status) cmd_status ;;
urls) cmd_urls ;;
kill-primary) cmd_kill_primary ;;
switchover) cmd_switchover ;;
isolate) shift && cmd_isolate "$@" ;;
cut) cmd_cut "${2:?usage: cut MACHINE}" ;;
heal) cmd_heal "${2:?usage: heal MACHINE}" ;;
etcd-stop) shift && cmd_etcd_stop "$@" ;;
slow) shift && cmd_slow "$@" ;;
slow-off) cmd_slow_off "${2:?usage: slow-off MACHINE}" ;;
exec) shift && cmd_exec "$@" ;;
*) die "usage: $0 up [--async] | down | status | urls | kill-primary | switchover | isolate NODE SECONDS | cut NODE | heal NODE | etcd-stop SECONDS | slow NODE DELAY LOSS | slow-off NODE | exec NODE CMD..." ;;
esac
