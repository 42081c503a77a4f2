#!/bin/sh
# The Sentinel of a pod of the redis-sentinel overlay. Its configuration lives on the pod's
# volume: Sentinel rewrites it with what it learns (the current primary, its peers), so a
# restarted Sentinel resumes from there. The first start writes it, monitoring the primary
# primary.sh finds. Environment: as redis.sh, plus QUORUM, DOWN_AFTER_MS and
# FAILOVER_TIMEOUT_MS. The last two are taken at every start, as the passwords are, so a changed
# manifest reaches Sentinels whose volume holds an older file. A Sentinel that started a
# failover and lost the vote (two Sentinels asking at once) tries again only after twice the
# failover timeout, which is why it is short.
#
# Passwords, from the Secret schedcache-redis-users at every start (so a restart takes a
# rotated one): the Sentinel logs in to Redis as the user `sentinel` (auth-user, auth-pass),
# and asks its clients and its peers for sentinels-requirepass (requirepass; the clients' URL
# carries it as ?sentinel_password=). Sentinel writes them into its file on the volume when
# it rewrites it: the one place a password reaches a volume (docs/kubernetes.md).
set -eu
umask 077
CONF="$DATA/sentinel/sentinel.conf"
mkdir -p "$DATA/sentinel"
if [ ! -s "$CONF" ]; then
  . "$(dirname "$0")/primary.sh"
  cat > "$CONF.new" <<END
port $SENTINEL_PORT
sentinel resolve-hostnames yes
sentinel announce-hostnames yes
sentinel announce-ip $SELF
sentinel monitor $MASTER_NAME $PRIMARY $REDIS_PORT $QUORUM
sentinel parallel-syncs $MASTER_NAME 1
END
  if [ -n "${BIND:-}" ]; then echo "bind $BIND" >> "$CONF.new"; fi
  mv "$CONF.new" "$CONF"
fi
for key in sentinel sentinels-requirepass; do
  [ -s "$USERS/$key" ] || { echo "sentinel.sh: no password $key in $USERS" >&2; exit 1; }
done
# The passwords of the last start (or of Sentinel's rewrite of them) out, the Secret's in.
grep -vE "^(requirepass |user default |sentinel (auth-user|auth-pass|down-after-milliseconds|failover-timeout) $MASTER_NAME )" \
  "$CONF" > "$CONF.new" || true
cat >> "$CONF.new" <<END
sentinel down-after-milliseconds $MASTER_NAME $DOWN_AFTER_MS
sentinel failover-timeout $MASTER_NAME $FAILOVER_TIMEOUT_MS
requirepass $(cat "$USERS/sentinels-requirepass")
sentinel auth-user $MASTER_NAME sentinel
sentinel auth-pass $MASTER_NAME $(cat "$USERS/sentinel")
END
mv "$CONF.new" "$CONF"
exec redis-server "$CONF" --sentinel
