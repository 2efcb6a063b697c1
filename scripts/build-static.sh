#!/usr/bin/env bash
# Builds the static limitproxy binary exactly as the Dockerfile does:
#   scripts/build-static.sh OUT [VERSION]
# With --check it then proves the binary is static (no ELF interpreter, no
# dynamic section) and that it runs: version, and check of the example.
set -euo pipefail
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
out=${1:?usage: scripts/build-static.sh [--check] OUT [VERSION]}
version=${2:-dev}
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w -X main.version=$version" -o "$out" ./cmd/limitproxy
if [ $check = 1 ]; then
  if readelf -l "$out" | grep -q 'INTERP'; then
    echo "build-static: $out asks for a dynamic loader" >&2; exit 1
  fi
  if readelf -d "$out" 2>/dev/null | grep -q 'NEEDED'; then
    echo "build-static: $out needs shared libraries" >&2; exit 1
  fi
  "$out" version
  "$out" check -config config.example.toml
fi
