#!/usr/bin/env bash
# The whole test suite, as README.md and .ci/run run it: formatting, go vet,
# staticcheck, every test under the race detector, and 10,000 executions of each
# fuzz target. It installs what it needs when missing: staticcheck from the
# Go module proxy, redis-server, nginx, caddy, nodejs, chromium, zsh and fish from
# Debian's packages (as root).
set -euo pipefail
cd "$(dirname "$0")/.."

STATICCHECK_VERSION=v0.8.2 # staticcheck 2026.1.x, built for Go 1.26
DEADCODE_VERSION=v0.52.0   # golang.org/x/tools

# step announces a step and its start; at exit, a last line gives the
# seconds each step took and the total (failed runs included).
steps=()
step_name=""
step_start=0
end_step() {
  if [ -n "$step_name" ]; then
    steps+=("$step_name: $((SECONDS - step_start))s")
  fi
}
step() {
  end_step
  step_name="$*"
  step_start=$SECONDS
  printf '\n== %s (at %ss)\n' "$*" "$SECONDS"
}
summary() {
  local rc=$?
  end_step
  local line="" s
  for s in "${steps[@]}"; do
    line+="${line:+; }$s"
  done
  if [ "$rc" = 0 ]; then
    printf '\n== done in %ss: %s\n' "$SECONDS" "$line"
  else
    printf '\n== failed (exit %s) after %ss: %s\n' "$rc" "$SECONDS" "$line" >&2
  fi
}
trap summary EXIT

gobin=$(go env GOPATH)/bin
export PATH="$gobin:$PATH"
if ! command -v staticcheck >/dev/null 2>&1; then
  step "installing staticcheck $STATICCHECK_VERSION"
  go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
fi

if ! command -v deadcode >/dev/null 2>&1; then
  step "installing deadcode $DEADCODE_VERSION"
  go install "golang.org/x/tools/cmd/deadcode@$DEADCODE_VERSION"
fi

# The Redis store's tests start their own redis-server on a free loopback
# port; they fail, clearly, without one.
if ! command -v redis-server >/dev/null 2>&1; then
  step "installing redis-server"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
    # The package starts a system instance; the tests use their own.
    (command -v systemctl >/dev/null 2>&1 && systemctl stop redis-server 2>/dev/null) || true
  else
    echo "redis-server is missing and this is not root: install it (apt-get install redis-server)" >&2
    exit 1
  fi
fi

# The bypass tests run real upstreams that normalize requests their own
# ways: nginx (Debian's package) and Flask (this machine image's Python).
if ! command -v nginx >/dev/null 2>&1 && [ -x /usr/sbin/nginx ]; then
  export PATH="$PATH:/usr/sbin"
fi
if ! command -v nginx >/dev/null 2>&1; then
  step "installing nginx"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null
    # The package may start a system instance; the tests use their own.
    (command -v systemctl >/dev/null 2>&1 && systemctl stop nginx 2>/dev/null) || true
    export PATH="$PATH:/usr/sbin"
  else
    echo "nginx is missing and this is not root: install it (apt-get install nginx-light)" >&2
    exit 1
  fi
fi
if ! python3 -c 'import flask' >/dev/null 2>&1; then
  step "installing Flask"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-flask >/dev/null
  fi
  python3 -c 'import flask' || { echo "python3 cannot import flask: install it (apt-get install python3-flask)" >&2; exit 1; }
fi

# The forward-auth tests run Caddy's forward_auth in front of limitproxy
# (Debian's package), as they run nginx's auth_request.
if ! command -v caddy >/dev/null 2>&1; then
  step "installing caddy"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq caddy >/dev/null
    # The package may start a system instance; the tests use their own.
    (command -v systemctl >/dev/null 2>&1 && systemctl stop caddy 2>/dev/null) || true
  else
    echo "caddy is missing and this is not root: install it (apt-get install caddy)" >&2
    exit 1
  fi
fi

# The forward-auth bypass test runs a Node backend (built-in modules
# only, no packages): Debian's nodejs.
if ! command -v node >/dev/null 2>&1; then
  step "installing nodejs"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs >/dev/null
  else
    echo "node is missing and this is not root: install it (apt-get install nodejs)" >&2
    exit 1
  fi
fi

# The completion scripts are checked by the shells they are for
# (zsh -n, fish -n): Debian's zsh and fish.
for sh in zsh fish; do
  if ! command -v "$sh" >/dev/null 2>&1; then
    step "installing $sh"
    if [ "$(id -u)" = 0 ]; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$sh" >/dev/null
    else
      echo "$sh is missing and this is not root: install it (apt-get install $sh)" >&2
      exit 1
    fi
  fi
done

# The dashboard's tests load the page in a real browser: headless Chromium
# (Debian's package), which they start and stop themselves; they fail,
# clearly, without it.
if ! command -v chromium >/dev/null 2>&1; then
  step "installing chromium"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "chromium is missing and this is not root: install it (apt-get install chromium)" >&2
    exit 1
  fi
fi

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
  echo "gofmt would change:" $unformatted >&2
  exit 1
fi

# Three modules: the product; bench/ (the benchmark harness) and
# deploy/kubernetes/validate (the Kubernetes manifests' checks, with
# k8s.io/api), each with its own dependencies on a replace of the product.
step "go mod tidy (every module)"
go mod tidy -diff
(cd bench && go mod tidy -diff)
(cd deploy/kubernetes/validate && go mod tidy -diff)

step "go vet"
go vet ./...
(cd bench && go vet ./...)
(cd deploy/kubernetes/validate && go vet ./...)

step "staticcheck"
staticcheck ./...
(cd bench && staticcheck ./...)
(cd deploy/kubernetes/validate && staticcheck ./...)

step "deadcode (nothing unreachable, tests counted as callers)"
# Examples without an Output line are compiled, not run (they need a
# server, or a *testing.T): they are documentation, not dead code.
dead=$(deadcode -test ./... | grep -v ': unreachable func: Example\(_[A-Za-z0-9_]*\)\?$' || true)
if [ -n "$dead" ]; then
  echo "$dead" >&2
  exit 1
fi

step "go test -race"
go test -race -count=1 ./...
step "go test -race (bench/)"
(cd bench && go test -race -count=1 ./...)
(cd deploy/kubernetes/validate && go test -race -count=1 ./...)
# The Dockerfile's build step, checked here since no Docker engine runs
# where this is developed: a static binary that runs.
step "static build (Dockerfile)"
bin=$(mktemp -d)
scripts/build-static.sh --check "$bin/limitproxy" test
rm -rf "$bin"

# The release build for another system, so that nothing Linux-only slips
# into the code.
step "release build (darwin/arm64)"
dist=$(mktemp -d)
TARGETS=darwin/arm64 scripts/release.sh v0.0.0-test "$dist" >/dev/null
rm -rf "$dist"

# Each fuzz target briefly, past its seed corpus (the seeds also run as
# ordinary tests above). The budget is a count of executions, not a time:
# a duration-bounded run of go1.26 can fail with "context deadline
# exceeded" at its end on a loaded machine, a race in Go's fuzzing
# coordinator (go.dev/issue/75804, fixed in go1.27).
step "go test -fuzz (briefly)"
for target in ./policy/config:FuzzParseRate ./policy/config:FuzzParse ./proxy:FuzzClientKey ./proxy/internal/clientkey:FuzzParsePeer ./proxy:FuzzRewriteKeyParts ./proxy:FuzzNormalizePath ./proxy:FuzzSyncTransport ./proxy:FuzzWriteHead ./internal/h1:FuzzParseHead; do
  go test -run '^$' -fuzz "^${target#*:}\$" -fuzztime 10000x "${target%%:*}"
done
