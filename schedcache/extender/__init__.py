"""A kube-scheduler extender on the shared cache (``schedcache extender``): filter,
prioritize and bind, so N active kube-scheduler replicas share one cache safely."""
