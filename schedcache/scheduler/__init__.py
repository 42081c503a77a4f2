"""The reference scheduler (``schedcache scheduler``), a room of its own as kube-scheduler keeps
``pkg/scheduler`` apart from its extender client: the loop (:mod:`.loop`) and the binder that
posts Bindings (:mod:`.binder`, shared with the extender's bind verb). The queue it pops from is
the cache's (:mod:`schedcache.ops.queue`)."""

from schedcache.scheduler.binder import ApiBinder
from schedcache.scheduler.loop import ReferenceScheduler

__all__ = ["ApiBinder", "ReferenceScheduler"]
