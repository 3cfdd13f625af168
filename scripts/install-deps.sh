#!/usr/bin/env bash
# install-deps.sh: make sure this machine has what fence's build and tests need.
#
# Idempotent: it checks first and installs only what is missing, with apt-get on Debian
# (running `apt-get update` once, and only if something is missing). It never starts or
# stops the machine's services: the tests start their own throwaway servers on free
# ports (internal/servers). While it installs, a policy-rc.d stops Debian's packages
# from starting their services.
#
# Needs:
#   Go         >= the go line of go.mod (not installed here: see the message)
#   gcc        for go test -race (cgo)
#   redis      redis-server, redis-cli          (redis-server, redis-tools)
#   PostgreSQL initdb, postgres                 (postgresql)
#   MariaDB    mariadbd, mariadb-install-db     (mariadb-server)
#   ZooKeeper  zkServer.sh, its jars and java   (zookeeper; the zookeeper package's
#              tests run it)
#   curl       the README tours use it; cmd/fence's docs test runs them as written
#   node, npm  the TypeScript client's, the dashboard's and the OpenAPI lint's tests need
#              Node.js >= 20.3: where the system's is older (Debian 12 ships 18),
#              scripts/node.sh installs one from the npm registry into a cache
#   python3    the Python client's tests (3.9+)
#   chromium   the dashboard's browser test (driven by playwright-core from npm)
#   systemd    systemd-analyze verifies packaging/fence.service
set -euo pipefail

cd "$(dirname "$0")/.."

log() { printf 'install-deps: %s\n' "$*"; }
warn() { printf 'install-deps: WARNING: %s\n' "$*" >&2; }
die() {
	printf 'install-deps: ERROR: %s\n' "$*" >&2
	exit 1
}

# have NAME: is the executable NAME in PATH or one of the usual server directories?
have() {
	local name=$1 dir
	command -v "$name" >/dev/null 2>&1 && return 0
	for dir in /usr/sbin /usr/local/sbin /sbin /usr/lib/postgresql/*/bin /usr/share/zookeeper/bin; do
		[ -x "$dir/$name" ] && return 0
	done
	return 1
}

# --- Go: checked, not installed (Debian's golang package is usually too old) ---------
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi
want_go=$(awk '$1 == "go" { print $2; exit }' go.mod)
if ! command -v go >/dev/null 2>&1; then
	die "go not found; install Go >= $want_go from https://go.dev/dl/ into /usr/local/go and add /usr/local/go/bin to PATH"
fi
have_go=$(go env GOVERSION | sed 's/^go//')
if [ "$(printf '%s\n%s\n' "$want_go" "$have_go" | sort -V | head -n1)" != "$want_go" ]; then
	die "go $have_go is older than go.mod's go $want_go; install Go >= $want_go from https://go.dev/dl/ (or let GOTOOLCHAIN=auto fetch it)"
fi
log "go $have_go (go.mod wants >= $want_go): ok"

# --- Debian packages: "package probe..." lines; missing if any probe is not found -----
required=(
	"gcc gcc"
	"libc6-dev /usr/include/stdio.h"
	"redis-server redis-server"
	"redis-tools redis-cli"
	"postgresql initdb postgres"
	"mariadb-server mariadbd mariadb-install-db"
	"zookeeper zkServer.sh java"
	"curl curl"
	"nodejs node"
	"npm npm"
	"python3 python3"
	"chromium /usr/bin/chromium"
	"systemd systemd-analyze"
	"iproute2 ip"
)
optional=()

# node_ready: a Node.js >= 20.3 for the tests, the system's or one scripts/node.sh
# installs into its cache (the tests' scripts find it there).
node_ready() {
	sh scripts/node.sh || die "no Node.js >= 20.3 for the TypeScript client's tests (see above)"
}

# missing LINE...: print the packages whose probes are not all found.
missing() {
	local line pkg probe probes
	for line in "$@"; do
		read -r pkg probes <<<"$line"
		for probe in $probes; do
			if [[ $probe == /* ]]; then
				[ -e "$probe" ] && continue
			else
				have "$probe" && continue
			fi
			echo "$pkg"
			break
		done
	done
}

need=$(missing "${required[@]}")
want=$(missing "${optional[@]}")
if [ -z "$need$want" ]; then
	log "every test dependency is installed: nothing to do"
	node_ready
	exit 0
fi
log "missing packages: $(echo $need $want)"

if ! command -v apt-get >/dev/null 2>&1; then
	die "apt-get not found (not Debian?); install these packages by hand: $(echo $need $want)"
fi
sudo=()
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null 2>&1 || die "not root and no sudo; as root run: apt-get install $(echo $need $want)"
	sudo=(sudo -n)
fi

# Keep Debian's maintainer scripts from starting the services they install (a
# policy-rc.d exiting 101 means "do not start"), unless the machine already has one.
policy=/usr/sbin/policy-rc.d
made_policy=
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\n# installed by fence scripts/install-deps.sh while it runs\nexit 101\n' |
		"${sudo[@]}" tee "$policy" >/dev/null
	"${sudo[@]}" chmod 755 "$policy"
	made_policy=1
fi
cleanup() {
	if [ -n "$made_policy" ]; then "${sudo[@]}" rm -f "$policy"; fi
}
trap cleanup EXIT

export DEBIAN_FRONTEND=noninteractive
aptlog=$(mktemp)
trap 'cleanup; rm -f "$aptlog"' EXIT
# apt_get runs apt-get quietly, its output in $aptlog, shown only if it fails.
apt_get() {
	if ! "${sudo[@]}" apt-get -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
		"$@" >"$aptlog" 2>&1 </dev/null; then
		tail -n 40 "$aptlog" >&2
		return 1
	fi
}

log "apt-get update"
apt_get update || die "apt-get update failed"

if [ -n "$need" ]; then
	# shellcheck disable=SC2086 # one word per package
	log "apt-get install $(echo $need)"
	apt_get install --no-install-recommends $need || die "apt-get install failed"
	still=$(missing "${required[@]}")
	[ -z "$still" ] || die "still missing after apt-get install: $(echo $still)"
fi

if [ -n "$want" ]; then
	# shellcheck disable=SC2086
	log "apt-get install $(echo $want) (optional)"
	if ! apt_get install --no-install-recommends $want; then
		warn "could not install $(echo $want); the tests that need it will fail saying so"
	elif [ -n "$(missing "${optional[@]}")" ]; then
		warn "installed $(echo $want) but its programs are still not found"
	fi
fi
node_ready
log "done"
