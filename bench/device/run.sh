#!/usr/bin/env bash
# The one command for the 16-core machine (issue 34's end-to-end figures), after
# bench/device/bundle.sh made .dev/ here and the checkout (with .dev/) was carried there:
#
#     bash .dev/run.sh bash bench/device/run.sh [BUDGET_S] [options]
#
# BUDGET_S (default 480): the wall seconds this may take in all; rows that cannot fit are
# shrunk or skipped, a row that overruns is cut at the budget (and keeps what it measured).
# Everything goes under $OUT (default ./out), each file as soon as it is measured:
#   machine.txt          nproc, CPU model, Python, the tree measured
#   api_capacity.json    binds/s of the fake API server alone (raw clients, P x T shapes)
#   api_server.prof      cProfile of its request threads under the widest shape
#   e2e-rN.json          bench/e2e.py, 5,000 nodes / 1,000 initial / M measured, N replicas
#   e2e-r1-profiled.json one more 1-replica row (--profile-measured pods, 2,000), profiled:
#   e2e-r1.prof          cProfile of that replica (Python 3.12+: every thread of it; before:
#                        the main thread), kept out of the rows above, whose rates it would slow
#   api.r1.prof          cProfile of the API server in that row (Python 3.12+ only)
#   redis.txt            Redis INFO cpu and commandstats after the rows
#   log.txt              everything printed, estimates included
# Options:
#   --tree DIR           import schedcache (and its lua/) from DIR: a "before" tree, e.g.
#                        .dev/before made by `bundle.sh --before REV`; files get a tree- prefix
#   --replicas 1,2,4,8   replica counts, in order
#   --measured 10000     measured pods a row: one number, or one per replica count (a,b,c,d)
#   --nodes 5000 --initial 1000
#   --skip-capacity      no api_capacity step (e.g. the second, "before" invocation)
#   --profile-measured N pods of the profiled 1-replica row (0: no such row)
#   --rate N             the pods/s a row is guessed to place, for its estimate (default 300;
#                        12 with --tree: the tree before issue 34)
#   --binding-process    each replica binds from a process of its own (bench/e2e.py's option;
#                        not with a --tree before issue 40); files get a bp- prefix
set -uo pipefail
budget=480
tree="" replicas="1,2,4,8" measured="10000" nodes=5000 initial=1000 capacity=1 profiled=2000 rate=""
bindopt=()
while [ $# -gt 0 ]; do
  case $1 in
    --tree) tree=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --measured) measured=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --initial) initial=$2; shift 2 ;;
    --skip-capacity) capacity=0; shift ;;
    --profile-measured) profiled=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --binding-process) bindopt=(--binding-process); shift ;;
    [0-9]*) budget=$1; shift ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
start=$(date +%s); deadline=$((start + budget))
out=${OUT:-./out}; mkdir -p "$out"; out=$(cd "$out" && pwd)
prefix=""; [ -n "$tree" ] && prefix="tree-"
[ ${#bindopt[@]} -gt 0 ] && prefix="bp-$prefix"
log="$out/${prefix}log.txt"
exec > >(tee -a "$log") 2>&1
left() { echo $((deadline - $(date +%s))); }
port=${E2E_REDIS_PORT:-6379}  # .dev/run.sh starts redis-server on 6379
url=redis://127.0.0.1:$port/2

{
  echo "nproc: $(nproc)"
  grep -m1 'model name' /proc/cpuinfo || true
  echo "python: $(python3 --version 2>&1)"
  echo "tree: ${tree:-$(pwd)} $( [ -f "${tree:-.}/REV" ] && cat "${tree}/REV" || git rev-parse HEAD 2>/dev/null)"
  echo "budget: ${budget}s, started $(date -u +%FT%TZ)"
} | tee "$out/${prefix}machine.txt"

if [ "$capacity" = 1 ] && [ "$(left)" -gt 120 ]; then
  echo "== the fake API server's binding capacity (raw clients, processes x threads)"
  timeout $(( $(left) / 4 )) python3 bench/device/api_capacity.py --pods 5000 \
    --clients 1x1 1x4 4x4 8x4 16x4 --json "$out/api_capacity.json"
  timeout 60 python3 bench/device/api_capacity.py --pods 5000 --clients 8x4 \
    --profile "$out/api_server.prof" >/dev/null
fi

# Per-row estimate (s), from runs on the 2-core machine (docs/performance.md, "Running the bench
# on 16 cores"): 20-33 s a row besides placing the pods for 1-8 replicas (processes and
# imports, the API server's objects at ~4,000/s, the feeder's first list 1.6-3.7 s, the checks,
# the capacity binds, the teardown), then the measured pods at a guessed, low rate.
estimate() {  # replicas measured -> seconds
  local r=$1 m=$2
  local pods_s=${rate:-300}; [ -z "$rate" ] && [ -n "$tree" ] && pods_s=12  # 58-550 now, 8-17 before
  echo $(( 16 + 2 * r + (nodes + initial + m) / 4000 + m / pods_s ))
}
IFS=, read -ra counts <<< "$replicas"
IFS=, read -ra wanted <<< "$measured"
# The profiled row runs last; the rows before leave it its estimate (profiling slows the replica
# about threefold: counted as three times the pods).
reserve=0; [ "$profiled" -gt 0 ] && reserve=$(estimate 1 $((3 * profiled)))
[ "$profiled" -gt 0 ] && counts+=(profiled)
for i in "${!counts[@]}"; do
  r=${counts[$i]}; m=${wanted[$i]:-${wanted[-1]}}; name="e2e-r$r"; profile=()
  if [ "$r" = profiled ]; then
    r=1; m=$profiled; name=e2e-r1-profiled; reserve=0
    profile=(--profile "$out/${prefix}e2e-r1.prof")
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 12))' && profile+=(--api-profile "$out/${prefix}api")
  fi
  est=$(estimate "$r" "$m"); remaining=$(( $(left) - reserve ))
  # Shrink the row to what the budget still holds (at least 500 pods), else skip it.
  while [ "$est" -gt "$remaining" ] && [ "$m" -gt 500 ]; do m=$((m / 2)); est=$(estimate "$r" "$m"); done
  if [ "$remaining" -lt 30 ] || [ "$est" -gt "$remaining" ]; then
    echo "== $name: skipped, ${remaining}s left, estimate ${est}s"; continue
  fi
  t0=$(date +%s)
  echo "== $name: $r replicas, $nodes nodes, $initial initial, $m measured: estimate ${est}s, ${remaining}s left"
  treeopt=(); [ -n "$tree" ] && treeopt=(--tree "$tree")
  timeout --kill-after=10 "$((remaining - 5))" python3 bench/e2e.py --url "$url" --flush \
    --nodes "$nodes" --initial "$initial" --measured "$m" --replicas "$r" \
    --capacity 2000 --capacity-clients 4x4 --timeout "$((remaining - 25))" \
    "${treeopt[@]}" "${bindopt[@]}" "${profile[@]}" --json "$out/${prefix}$name.json" | grep -v '^$'
  echo "   row took $(( $(date +%s) - t0 ))s"
done

{ redis-cli -p "$port" info cpu; redis-cli -p "$port" info commandstats; } > "$out/${prefix}redis.txt" 2>&1
echo "== done in $(( $(date +%s) - start ))s; files in $out:"; ls "$out"
