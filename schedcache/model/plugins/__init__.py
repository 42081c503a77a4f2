"""kube-scheduler's default plugins on schedcache's NodeInfos, one module per plugin as
upstream's ``pkg/scheduler/framework/plugins/<name>/``; :mod:`.registry` runs them in the
default profile's order. See docs/constraints.md."""
