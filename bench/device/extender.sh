#!/usr/bin/env bash
# The extender bench (issue 43, bench/extender.py) on the 16-core machine, after
# bench/device/bundle.sh made .dev/ here and the checkout (with .dev/) was carried there:
#
#     bash .dev/run.sh bash bench/device/extender.sh [BUDGET_S] [options]
#
# BUDGET_S (default 480): the wall seconds this may take in all. Rows run in the order given
# (one profile, then the next); each row's figures are printed (and kept in the log) as soon as
# it is measured, so a budget cut short keeps the rows already done.
# Everything goes under $OUT (default ./out):
#   extender-machine.txt  nproc, CPU model, Python, the tree measured
#   extender-log.txt      every row's figures as measured, then the table
#   extender.json         the table (bench/results/extender.json), when every row finished
# Options:
#   --extenders "1 8"     extender processes (each with a client of its own), per row
#   --profiles "full bind-only"
#   --pods 2000 --nodes 5000 --sample 500
#   --before REV          also rows for the extender of REV (needs the git history there)
set -uo pipefail
budget=480 extenders="1 8" profiles="full bind-only" pods=2000 nodes=5000 sample=500 before=""
while [ $# -gt 0 ]; do
  case $1 in
    --extenders) extenders=$2; shift 2 ;;
    --profiles) profiles=$2; shift 2 ;;
    --pods) pods=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --sample) sample=$2; shift 2 ;;
    --before) before=$2; shift 2 ;;
    [0-9]*) budget=$1; shift ;;
    *) echo "extender.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
out=${OUT:-./out}; mkdir -p "$out"; out=$(cd "$out" && pwd)
{
  echo "nproc: $(nproc)"
  grep -m1 'model name' /proc/cpuinfo || true
  echo "python: $(python3 --version 2>&1)"
  echo "tree: $(pwd) $(git rev-parse HEAD 2>/dev/null)"
  echo "budget: ${budget}s, started $(date -u +%FT%TZ)"
} | tee "$out/extender-machine.txt"
beforeopt=(); [ -n "$before" ] && beforeopt=(--before "$before")
rm -f bench/results/extender.json  # the copy carried here: only this run's table is kept
# shellcheck disable=SC2086  # the lists are meant to split
timeout --kill-after=10 "$budget" python3 bench/extender.py --nodes "$nodes" --pods "$pods" \
  --sample "$sample" --extenders $extenders --profiles $profiles --port 6499 \
  "${beforeopt[@]}" 2>&1 | tee "$out/extender-log.txt"
[ -f bench/results/extender.json ] && cp bench/results/extender.json "$out/extender.json"
echo "== done; files in $out:"; ls "$out"
