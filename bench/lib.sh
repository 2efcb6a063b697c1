# Shared by the bench/*.sh scripts: replace (or append) one generated
# section of BENCHMARKS.md, between <!-- NAME:begin --> and <!-- NAME:end -->.
# Usage: write_section NAME FILE
# The file is $BENCHMARKS_FILE when set (bench/all.sh assembles a new
# BENCHMARKS.md that way), else BENCHMARKS.md.
write_section() {
  local name=$1 file=$2 out=${BENCHMARKS_FILE:-BENCHMARKS.md}
  if [ ! -f "$out" ]; then
    printf '# Benchmarks\n\nEvery figure here is written by a script in bench/; the command that produced each section is given in it.\n\n' >"$out"
  fi
  if grep -q "<!-- $name:begin -->" "$out"; then
    awk -v f="$file" -v b="<!-- $name:begin -->" -v e="<!-- $name:end -->" '
      $0 == b { while ((getline l < f) > 0) print l; skip = 1; next }
      $0 == e { skip = 0; next }
      !skip' "$out" >"$out.new"
    mv "$out.new" "$out"
  else
    cat "$file" >>"$out"
  fi
  echo "$out: $name section updated" >&2
  if [ "$out" = BENCHMARKS.md ]; then
    headline
  fi
}

# headline rewrites README.md's table of headline figures from
# BENCHMARKS.md (bench/headline), so that the README never quotes a
# figure the harness did not write.
headline() {
  (cd bench && go run ./headline -root ..) || echo "README.md's headline table was not rewritten (above: why)" >&2
}

machine() {
  echo "$(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(go version | cut -d' ' -f3)"
}

# need CMD PACKAGE: install Debian's PACKAGE when CMD is missing and we are
# root; otherwise say what to install and fail.
need() {
  local cmd=$1 pkg=$2
  if command -v "$cmd" >/dev/null 2>&1 || [ -x "/usr/sbin/$cmd" ]; then
    return 0
  fi
  if [ "$(id -u)" = 0 ]; then
    echo "installing $pkg (apt-get)" >&2
    if [ -z "${APT_UPDATED:-}" ]; then
      apt-get update -qq >&2
      APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
  else
    echo "$0: $cmd is missing; install it (apt-get install $pkg)" >&2
    exit 1
  fi
}

# base_tree BASE: a temporary directory $bin (removed on exit), BASE
# checked out in $wt (a detached worktree, removed on exit), and $short,
# BASE's short hash: what the scripts that compare this tree against an
# earlier commit (stack.sh, house.sh, accesslog.sh) start from.
base_tree() {
  bin=$(mktemp -d)
  wt="$bin/base"
  trap 'git worktree remove --force "$wt" 2>/dev/null || true; rm -rf "$bin"' EXIT
  git worktree add -q --detach "$wt" "$1"
  short=$(git rev-parse --short "$1")
}

# pin_proxy: $pin, $wrkcpu and $placement for bench/proxybench: with two
# CPUs or more (and taskset), the proxy measured runs on CPU 1 and wrk and
# the upstream share CPU 0, as bench/proxy.sh pins them.
pin_proxy() {
  pin=() wrkcpu=() placement="wrk, the proxies and the upstream share all $(nproc) cores"
  if [ "$(nproc)" -ge 2 ] && command -v taskset >/dev/null 2>&1; then
    pin=(taskset -c 1) wrkcpu=(-wrk-cpu 0 -own-cpu 0)
    placement="the proxy being measured runs on CPU 1; wrk and the upstream share CPU 0 (taskset)"
  fi
}
