#!/bin/sh
# Redis in a pod of the redis-sentinel overlay: the primary if the Sentinels (or, before any
# answers, primary.sh's fallbacks) name this pod, else a replica of the one they name. AOF
# `everysec` on the volume, as redis-single. Environment: SELF (this pod's host), PEERS
# (every pod's host), MASTER_NAME, REDIS_PORT, SENTINEL_PORT, DATA, RULES, USERS, RUN,
# BIND (optional).
#
# As redis-single's redis.sh: the ACL users of users.acl.rules (a copy of redis-single's,
# kept equal by tests/test_deploy.py) with their passwords from the Secret
# schedcache-redis-users (one file per user under $USERS), written to $RUN (memory: the
# passwords never reach the volume); the default user is off, protected mode on. Two users
# more, each with the least the Redis docs allow: `replica`, which replicas log in as to
# their primary (masteruser/masterauth: every pod may become a replica), and `sentinel`,
# which the Sentinels log in as (sentinel.sh's auth-user).
set -eu
umask 077
. "$(dirname "$0")/primary.sh"
acl="$RUN/users.acl"
password() {
  [ -s "$USERS/$1" ] || { echo "redis.sh: no password for $1 in $USERS" >&2; exit 1; }
  cat "$USERS/$1"
}
echo "user default off resetpass resetchannels -@all" > "$acl.new"
while read -r user rules; do
  case "$user" in "" | "#"*) continue ;; esac
  case "$rules" in
    *nopass*) echo "user $user $rules" >> "$acl.new" ;;
    *) echo "user $user $rules >$(password "$user")" >> "$acl.new" ;;
  esac
done < "$RULES"
echo "user replica reset on resetchannels -@all +psync +replconf +ping >$(password replica)" \
  >> "$acl.new"
echo "user sentinel reset on resetchannels &__sentinel__:hello -@all +multi +exec +slaveof" \
  "+ping +subscribe +publish +info +role +config|rewrite +client|setname +client|kill" \
  "+script|kill >$(password sentinel)" >> "$acl.new"
mv "$acl.new" "$acl"
# The replication password in a file in $RUN too (not on the command line, which any process
# of the pod can read); Sentinel's CONFIG REWRITE after a failover rewrites this file only.
cat > "$RUN/redis.conf.new" <<END
masteruser replica
masterauth $(password replica)
END
mv "$RUN/redis.conf.new" "$RUN/redis.conf"
# Replicas join one at a time (the StatefulSet waits for each to be ready), so the primary
# need not wait 5 s for more before it streams a sync (repl-diskless-sync-delay).
set -- "$RUN/redis.conf" --port "$REDIS_PORT" --dir "$DATA" --appendonly yes \
  --appendfsync everysec --save "" --aclfile "$acl" --protected-mode yes \
  --replica-announce-ip "$SELF" --repl-diskless-sync-delay 0
if [ -n "${BIND:-}" ]; then set -- "$@" --bind "$BIND"; fi
if [ "$PRIMARY" != "$SELF" ]; then set -- "$@" --replicaof "$PRIMARY" "$REDIS_PORT"; fi
echo "redis.sh: $SELF starts; primary: $PRIMARY" >&2
exec redis-server "$@"
