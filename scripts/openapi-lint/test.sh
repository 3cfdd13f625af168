#!/bin/sh
# Lints fencehttp/openapi.json as its users' tools read it, so that it stays clean:
#   - Redocly CLI (recommended rules): no errors;
#   - Spectral (the spectral:oas ruleset, .spectral.yaml): no errors;
#   - openapi-typescript: the types it generates keep the required fields of every
#     error schema required (check-types.mjs).
# Warnings are shown, not failed. The tools' versions are pinned in package-lock.json
# and installed with npm ci into node_modules here, again only when the lock file
# changes. Callable from anywhere; scripts/test.sh runs it.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
doc=${FENCE_OPENAPI:-$root/fencehttp/openapi.json} # FENCE_OPENAPI: another document, to see the check fail

. "$root/scripts/node.sh" || exit 1
cd "$here"
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
	npm ci --no-audit --no-fund --loglevel=error
fi
# No telemetry, no update checks: the tools run offline.
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true SCARF_ANALYTICS=false NO_UPDATE_NOTIFIER=1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/fence-openapi-lint.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
passed=0
failed=0
check() {
	name=$1
	shift
	echo "--- $name"
	if "$@"; then
		passed=$((passed + 1))
		echo "ok: $name"
	else
		failed=$((failed + 1))
		echo "FAIL: $name" >&2
	fi
}
check "redocly lint" node_modules/.bin/redocly lint --format=stylish "$doc"
check "spectral lint (spectral:oas)" node_modules/.bin/spectral lint --ruleset .spectral.yaml --fail-severity=error "$doc"
gen() { node_modules/.bin/openapi-typescript "$doc" --output "$tmp/api.d.ts" && node check-types.mjs "$doc" "$tmp/api.d.ts"; }
check "openapi-typescript keeps the required fields" gen

echo "openapi-lint: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
