#!/usr/bin/env bash
# The Debian packages of the tests' servers, installed where missing (idempotent, quick once done):
#   ./scripts/debian.sh postgres mariadb
# postgres: PostgreSQL 15 with wal2json (the tests, the postgres benchmark); mariadb: MariaDB's
# server and client (tests/harness/servers/mariadb.py). scripts/setup.sh runs it; the test
# command runs it in the background, beside pip's install of the Python packages.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" --helpers

# apt-get update, then a non-interactive install.
# The tests run their servers themselves, never the packages' services. Without systemd (a
# container), a package's postinst starts its service through invoke-rc.d and fails the install
# if that start fails (mariadb-server does): there, unless the image already has one, a
# policy-rc.d that refuses every start is in place for the install only, as Docker's images do.
apt_install() {
  local policy=/usr/sbin/policy-rc.d placed=0 status=0
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  if [ ! -d /run/systemd/system ] && [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && placed=1
  fi
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null || status=$?
  if [ "$placed" = 1 ]; then rm -f "$policy"; fi
  [ "$status" = 0 ] || die "apt-get install $* failed"
}

# What each server needs, and whether it is there already.
MISSING=()
for wanted in "$@"; do
  case "$wanted" in
    postgres)
      # PostgreSQL 15 with wal2json (the tests and the postgres benchmark).
      if ! { ls /usr/lib/postgresql/*/lib/wal2json.so && ls /usr/lib/postgresql/*/bin/initdb; } >/dev/null 2>&1; then
        MISSING+=(postgresql-15 postgresql-15-wal2json)
      fi ;;
    mariadb)
      # Only the binaries are used: the tests' server has its own port, socket, data directory
      # and option file, so the system's MariaDB service (which the package may start) is never
      # needed.
      if ! { [ -x /usr/sbin/mariadbd ] && command -v mariadb-install-db; } >/dev/null 2>&1; then
        MISSING+=(mariadb-server mariadb-client)
      fi ;;
    *) die "scripts/debian.sh knows postgres and mariadb, not '$wanted'" ;;
  esac
done
[ "${#MISSING[@]}" = 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  die "the tests need Debian's ${MISSING[*]}: as root, apt-get install ${MISSING[*]}"
fi
# One install for all of them: one dpkg run.
say "installing ${MISSING[*]} from Debian's packages"
apt_install "${MISSING[@]}"
