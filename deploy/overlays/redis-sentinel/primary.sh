# Sourced by redis.sh and sentinel.sh: sets PRIMARY to the host of the current primary.
# 1. what any Sentinel answers (after a failover, the promoted replica);
# 2. else what this pod's own Sentinel last wrote to its file on the volume (a whole-set
#    restart: no Sentinel is up yet, but each remembers the last primary it saw);
# 3. else the first peer: the very first start of the set.
# The Sentinels ask for their password (requirepass): the Secret's key sentinels-requirepass.
PRIMARY=""
for peer in $PEERS; do
  PRIMARY=$(REDISCLI_AUTH=$(cat "$USERS/sentinels-requirepass") timeout 3 \
    redis-cli -h "$peer" -p "$SENTINEL_PORT" --raw \
    SENTINEL get-master-addr-by-name "$MASTER_NAME" 2>/dev/null | head -n 1) || PRIMARY=""
  case "$PRIMARY" in
    "" | *" "* | ERR* | *rror*) PRIMARY="" ;;
    *) break ;;
  esac
done
if [ -z "$PRIMARY" ] && [ -s "$DATA/sentinel/sentinel.conf" ]; then
  PRIMARY=$(awk -v m="$MASTER_NAME" '$1 == "sentinel" && $2 == "monitor" && $3 == m {print $4}' \
    "$DATA/sentinel/sentinel.conf")
fi
if [ -z "$PRIMARY" ]; then
  set -- $PEERS
  PRIMARY=$1
fi
