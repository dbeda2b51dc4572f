#!/usr/bin/env bash
# ensure-chromium.sh makes sure Debian's chromium is installed for the dashboard's
# browser tests (tests/ui_browser_test.go drives it headless with chromedp) and prints
# its path as the last line of stdout (progress goes to stderr):
#
#   CHROMIUM=$(scripts/ensure-chromium.sh)
#
# It installs the chromium package with apt-get when /usr/bin/chromium is missing (as
# root; otherwise it says which command to run) and does nothing when it is there, so
# calling it twice is harmless. Only Debian's package is used: nothing is downloaded
# from a browser vendor, so it works where only the distribution's mirror is reachable.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "ensure-chromium: $*" >&2; }
die() { log "ERROR: $*"; exit 1; }
. "$here/lib/install.sh" # apt_install, PGRUN_NO_INSTALL

bin=${PGRUN_CHROMIUM:-/usr/bin/chromium}
if [ ! -x "$bin" ]; then
  log "installing chromium (apt-get)"
  apt_install chromium fonts-dejavu-core
  [ -x "$bin" ] || die "chromium was installed but $bin is not there"
fi
log "$("$bin" --version 2>/dev/null || echo "$bin")"
echo "$bin"
