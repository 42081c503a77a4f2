#!/bin/sh
# The Sentinel of a pod of the redis-sentinel overlay. Its configuration lives on the pod's
# volume: Sentinel rewrites it with what it learns (the current primary, its peers), so a
# restarted Sentinel resumes from there. The first start writes it, monitoring the primary
# primary.sh finds. Environment: as redis.sh, plus QUORUM and DOWN_AFTER_MS.
set -eu
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
sentinel down-after-milliseconds $MASTER_NAME $DOWN_AFTER_MS
sentinel failover-timeout $MASTER_NAME 60000
sentinel parallel-syncs $MASTER_NAME 1
END
  if [ -n "${BIND:-}" ]; then echo "bind $BIND" >> "$CONF.new"; fi
  mv "$CONF.new" "$CONF"
fi
exec redis-server "$CONF" --sentinel
