"""The API server side of the extender's bind: the Binding, and reading a pod the filter did
not carry. Needs the ``kube`` extra (the official client)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubernetes import client as kube_client
from kubernetes.client.exceptions import ApiException


class ApiBinder:
    """Binds through ``pods/binding`` (``create_namespaced_pod_binding``), as kube-scheduler's
    DefaultBinder does."""

    def __init__(self, api: kube_client.CoreV1Api, timeout: float = 10.0) -> None:
        self.api = api
        self.timeout = timeout

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = kube_client.V1Binding(
            api_version="v1",
            kind="Binding",
            metadata=kube_client.V1ObjectMeta(name=name, namespace=namespace, uid=uid),
            target=kube_client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        # _preload_content=False: the API answers a Status, which the client would try (and
        # fail) to read as a V1Binding; the raw response is a urllib3 one.
        try:
            response: Any = self.api.create_namespaced_pod_binding(
                name, namespace, body, _preload_content=False, _request_timeout=self.timeout
            )
        except ApiException as error:
            # 409: already bound. If to this node, an earlier attempt of this very bind landed
            # (the client resends a POST whose connection broke after the server took it).
            if error.status == 409 and self._bound_to(namespace, name, uid) == node:
                return
            raise
        response.read()  # drained, so the connection goes back to the pool for the next bind
        response.release_conn()

    def _bound_to(self, namespace: str, name: str, uid: str) -> str:
        pod = self.read_pod(namespace, name)
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        return str(spec.get("nodeName") or "") if metadata.get("uid") == uid else ""

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        response: Any = self.api.read_namespaced_pod(
            name, namespace, _preload_content=False, _request_timeout=self.timeout
        )
        try:
            value = json.loads(response.data)
        finally:
            response.release_conn()
        if not isinstance(value, Mapping):
            raise ValueError("the API server's pod is not an object")
        return value
