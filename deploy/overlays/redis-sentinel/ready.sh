#!/bin/sh
# Readiness of Redis in a pod of the redis-sentinel overlay: the primary, or a replica whose
# link to the primary is up (a replica still loading or syncing is not ready yet, so the
# StatefulSet starts the next pod, and clients' WAIT, only once it holds the data). Asked as
# the user `sentinel`, which may read INFO (the user `probe` may only PING).
set -eu
info=$(REDISCLI_AUTH=$(cat "$USERS/sentinel") timeout 3 redis-cli --user sentinel \
  -h "${BIND:-127.0.0.1}" -p "$REDIS_PORT" INFO replication)
printf '%s\n' "$info" | grep -qE '^(role:master|master_link_status:up)'
