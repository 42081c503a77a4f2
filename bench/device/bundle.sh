#!/usr/bin/env bash
# Make .dev/ for bench/device/run.sh on the 16-core machine (Python 3.12, no package registry,
# no network, no redis-server; it has msgpack, click, rich, PyYAML, prometheus-client, aiohttp,
# numpy). From the project root:
#     bash bench/device/bundle.sh [--before REV]
# 1. ../shared/manycore/bundle.sh: redis-server/redis-cli with their libraries, .dev/run.sh,
#    and the wheels of redis, hiredis, fakeredis, lupa;
# 2. here: cp312 manylinux / py3 wheels of every other package schedcache needs at run time
#    (pyproject's dependencies plus the kube and extender extras: the kubernetes client for
#    sync, the replicas and bench/e2e.py) WITH their dependencies, except numpy (there already,
#    and 18 MB); versions pinned to the ones installed here when pip can find them;
# 3. --before REV: that commit's schedcache/ and lua/ in .dev/before, for run.sh --tree.
# .dev/run.sh installs the wheels with --no-deps, so the set must be closed: this script checks
# that every wheel's requirements (for Python 3.12 on Linux) are carried or on that machine.
set -euo pipefail
root=$(git rev-parse --show-toplevel); cd "$root"
before=""
while [ $# -gt 0 ]; do
  case $1 in
    --before) before=$2; shift 2 ;;
    *) echo "usage: bash bench/device/bundle.sh [--before REV]" >&2; exit 2 ;;
  esac
done
shared=$(cd "$root/.." && pwd)/shared/manycore/bundle.sh
[ -f "$shared" ] || { echo "bundle.sh: $shared not found (the project's shared/ beside the checkout)" >&2; exit 1; }
if [ -d .git ]; then
  bash "$shared" >/dev/null
else
  # A git worktree: .git is a file, and the shared script's `mkdir -p .git/info` (to exclude
  # .dev/) fails. It runs in a stage whose "git rev-parse --show-toplevel" is the stage itself.
  stage=$(mktemp -d); shim=$(mktemp -d)
  mkdir -p "$stage/.git/info"; echo '/.dev/' > "$stage/.git/info/exclude"
  printf '#!/bin/sh\necho "%s"\n' "$stage" > "$shim/git"; chmod +x "$shim/git"
  PATH="$shim:$PATH" bash "$shared" >/dev/null
  rm -rf .dev; mv "$stage/.dev" .dev; rm -rf "$stage" "$shim"
fi

# The requirements, read from pyproject.toml (python3 here is 3.11+: tomllib).
requirements=$(python3 - <<'PY'
import tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = project.get("optional-dependencies", {})
wanted = [*project["dependencies"], *extras.get("kube", []), *extras.get("extender", [])]
print(" ".join(sorted({r for r in wanted if not r.lower().startswith("numpy")})))
PY
)
# Pin what is installed here (the versions the tests ran with) where a cp312 wheel exists.
pins=$(mktemp); tmp=$(mktemp -d); trap 'rm -rf "$pins" "$tmp"' EXIT
py=python3; [ -x .venv/bin/python ] && py=.venv/bin/python
"$py" -m pip freeze --exclude-editable 2>/dev/null | grep -E '^[A-Za-z0-9_.-]+==' > "$pins" || true
download() {
  python3 -m pip download -q --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$tmp" "$@" $requirements
}
download -c "$pins" 2>/dev/null || { echo "bundle.sh: pinned versions unavailable for 3.12, resolving afresh" >&2; download; }
norm() { basename "$1" | cut -d- -f1 | tr 'A-Z_.' 'a-z--'; }
have=" "; for w in .dev/whl/*.whl; do have="$have$(norm "$w") "; done
for w in "$tmp"/*.whl; do
  name=$(norm "$w")
  case "$have" in *" $name "*) continue ;; esac  # the shared bundle's pinned one stays
  [ "$name" = numpy ] && continue
  cp "$w" .dev/whl/
done
if [ -n "$before" ]; then
  rm -rf .dev/before; mkdir -p .dev/before
  git archive "$before" schedcache lua | tar -x -C .dev/before
  echo "$before $(git rev-parse "$before")" > .dev/before/REV
fi
python3 "$root/bench/device/closure.py" .dev/whl
ls .dev/whl | sed 's/-py.*\|-cp.*//' | tr '\n' ' '; echo
du -sh .dev
echo "there (docs/performance.md, \"Running the bench on 16 cores\"), .dev/ carried along:"
echo "  bash .dev/run.sh bash bench/device/run.sh 330"
[ -d .dev/before ] && echo "  bash .dev/run.sh bash bench/device/run.sh 150 --tree .dev/before --replicas 1,8 --measured 300 --skip-capacity --profile-measured 0"
exit 0
