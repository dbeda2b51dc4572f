# scripts/lib/install.sh: how pgrun's scripts install what is missing. Sourced, with
# log and die defined by the caller. Every script that may change the machine goes
# through apt_install (Debian's packages) or may_install (anything else), so that one
# switch holds them all:
#
#   PGRUN_NO_INSTALL=1   install nothing: name what is missing and the command that
#                        installs it, and exit 3
#
# README.md lists what the scripts may install or change.

# may_install stops the script (exit 3) with a line naming what is missing and how
# to install it when PGRUN_NO_INSTALL=1; otherwise it returns and the caller installs.
may_install() { # what how
  if [ "${PGRUN_NO_INSTALL:-}" = 1 ]; then
    log "missing: $1; install it with: $2 (nothing installed: PGRUN_NO_INSTALL=1)"
    exit 3
  fi
}

# apt_install installs Debian packages quietly (their output only if it fails),
# after may_install. It needs root and apt-get.
apt_install() { # package...
  may_install "$*" "sudo apt-get install $*"
  [ "$(id -u)" -eq 0 ] || die "need to install $* with apt-get, which needs root; run: sudo apt-get install $*"
  command -v apt-get >/dev/null 2>&1 || die "need $* but there is no apt-get here; install them by hand"
  export DEBIAN_FRONTEND=noninteractive
  local out
  out=$(mktemp)
  if ! { apt-get update -q && apt-get install -y -q --no-install-recommends "$@"; } >"$out" 2>&1; then
    tail -n 40 "$out" >&2
    rm -f "$out"
    die "apt-get install $* failed"
  fi
  rm -f "$out"
}
