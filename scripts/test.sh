#!/usr/bin/env bash
# test.sh: the one test command, for developers and CI (.ci/run).
#
#   scripts/test.sh            everything: deps, gofmt, go vet, go test -race ./..., then
#                              the TypeScript and Python clients' and the dashboard's tests,
#                              and the OpenAPI document's lint (scripts/openapi-lint)
#   scripts/test.sh -short     skip the integration tests that start real servers
#   scripts/test.sh -run Foo   any other go test flags are passed through
#   CI=true scripts/test.sh    as .ci/run: also -count=1, no cached test results
#
# It installs missing dependencies first (scripts/install-deps.sh), then fails on the
# first step that fails. Integration tests start their own throwaway servers on free
# ports; the machine's services (ports 6379, 5432, 3306) are never touched.
set -euo pipefail

cd "$(dirname "$0")/.."

if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
	export PATH="/usr/local/go/bin:$PATH"
fi

step() { printf '\n=== %s   (at %ds)\n' "$*" "$SECONDS"; }
fail() {
	printf '\nFAIL: %s\n' "$*" >&2
	exit 1
}

step "dependencies (scripts/install-deps.sh)"
scripts/install-deps.sh || fail "installing dependencies"

step "gofmt -l"
unformatted=$(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*' -print0 | xargs -0 -r gofmt -l)
if [ -n "$unformatted" ]; then
	printf '%s\n' "$unformatted"
	fail "gofmt: the files above need formatting (gofmt -w FILE)"
fi

step "go vet ./..."
go vet ./... || fail "go vet"

# Under CI, run every test for real: a cached pass would hide a flaky test or a
# server that no longer starts on this machine. (A -count given as an argument wins.)
testflags=(-race -timeout 30m)
if [ -n "${CI:-}" ]; then
	testflags+=(-count=1)
fi
step "go test ${testflags[*]} ${*:+$* }./..."
go test "${testflags[@]}" "$@" ./... || fail "go test"

# The clients in other languages and the dashboard's browser test run against a real
# fence serve too; they run with the whole suite, not with go test flags of their own.
if [ $# -eq 0 ]; then
	for t in clients/typescript/test.sh clients/python/test.sh fencehttp/ui/test/test.sh scripts/openapi-lint/test.sh; do
		step "$t"
		bash "$t" || fail "$t"
	done
fi

printf '\nPASS: gofmt, go vet, go test -race and the clients passed (%ds)\n' "$SECONDS"
