#!/usr/bin/env bash
# Builds release archives of limitproxy: a static binary (CGO off, paths
# trimmed, the version stamped into `limitproxy version`) for linux and
# darwin on amd64 and arm64, each packed with README, LICENSE, CHANGELOG and
# the example configuration, plus SHA256SUMS:
#   scripts/release.sh VERSION [OUTDIR]        e.g. scripts/release.sh v0.2.0
# Set TARGETS="linux/amd64" to build fewer. Tag the commit first; the
# binaries also carry the commit through Go's build info.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: scripts/release.sh VERSION [OUTDIR]}
out=${2:-dist}
targets=${TARGETS:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64}
mkdir -p "$out"
for target in $targets; do
  os=${target%/*} arch=${target#*/}
  name="limitproxy_${version#v}_${os}_${arch}"
  stage=$(mktemp -d)
  mkdir "$stage/$name"
  GOOS=$os GOARCH=$arch CGO_ENABLED=0 go build -trimpath \
    -ldflags="-s -w -X main.version=$version" -o "$stage/$name/limitproxy" ./cmd/limitproxy
  cp README.md LICENSE CHANGELOG.md config.example.toml "$stage/$name/"
  tar -C "$stage" -czf "$out/$name.tar.gz" "$name"
  rm -rf "$stage"
  echo "$out/$name.tar.gz"
done
(cd "$out" && sha256sum -- *.tar.gz > SHA256SUMS)
