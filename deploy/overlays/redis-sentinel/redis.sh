#!/bin/sh
# Redis in a pod of the redis-sentinel overlay: the primary if the Sentinels (or, before any
# answers, primary.sh's fallbacks) name this pod, else a replica of the one they name. AOF
# `everysec` on the volume, as redis-single. Environment: SELF (this pod's host), PEERS
# (every pod's host), MASTER_NAME, REDIS_PORT, SENTINEL_PORT, DATA, BIND (optional).
set -eu
. "$(dirname "$0")/primary.sh"
# Replicas join one at a time (the StatefulSet waits for each to be ready), so the primary
# need not wait 5 s for more before it streams a sync (repl-diskless-sync-delay).
set -- --port "$REDIS_PORT" --dir "$DATA" --appendonly yes --appendfsync everysec --save "" \
  --protected-mode no --replica-announce-ip "$SELF" --repl-diskless-sync-delay 0
if [ -n "${BIND:-}" ]; then set -- "$@" --bind "$BIND"; fi
if [ "$PRIMARY" != "$SELF" ]; then set -- "$@" --replicaof "$PRIMARY" "$REDIS_PORT"; fi
echo "redis.sh: $SELF starts; primary: $PRIMARY" >&2
exec redis-server "$@"
