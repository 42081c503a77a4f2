#!/bin/sh
# Redis of the redis-single overlay: ACL users from users.acl.rules (one per component, their
# rules made by `schedcache acl`), each with its password from the Secret
# schedcache-redis-users (one file per user under $USERS), written to an ACL file in $RUN
# (a memory-backed emptyDir: the passwords never reach the data volume). The default user is
# off and has no password, so nothing is served without one: protected mode stays on.
# Environment: RULES, USERS, RUN, DATA, REDIS_PORT, BIND (optional).
set -eu
umask 077
acl="$RUN/users.acl"
echo "user default off resetpass resetchannels -@all" > "$acl.new"
while read -r user rules; do
  case "$user" in "" | "#"*) continue ;; esac
  case "$rules" in
    *nopass*) echo "user $user $rules" >> "$acl.new" ;;
    *)
      [ -s "$USERS/$user" ] || { echo "redis.sh: no password for $user in $USERS" >&2; exit 1; }
      echo "user $user $rules >$(cat "$USERS/$user")" >> "$acl.new" ;;
  esac
done < "$RULES"
mv "$acl.new" "$acl"
set -- --port "$REDIS_PORT" --dir "$DATA" --appendonly yes --appendfsync everysec --save "" \
  --aclfile "$acl" --protected-mode yes
if [ -n "${BIND:-}" ]; then set -- "$@" --bind "$BIND"; fi
exec redis-server "$@"
