"""The API server side of the extender's bind: the Binding, and reading a pod the filter did
not carry. Needs the ``kube`` extra (the official client)."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlsplit

from kubernetes import client as kube_client
from kubernetes.client.exceptions import ApiException

# Seconds the Binding's credentials are reused before the configuration is asked again (its
# refresh hook renews exec-plugin and service-account tokens long before they expire).
AUTH_REFRESH = 1.0


class ApiBinder:
    """Binds through ``pods/binding``, as kube-scheduler's DefaultBinder does.

    The POST goes through the official client's own connection pool (its TLS, proxy and
    retries), with its configuration's current credentials (a refreshed token included), but
    not through its generated method: argument validation and model serialization cost
    three times the rest of a Binding's client side (0.44 against 0.13 ms of CPU), a third of
    what a scheduler replica spends on a pod after the columns. On a live kept-alive
    connection of that pool the Binding is written and read by ``http.client`` itself
    (:func:`_kept_alive`). Answers other than 2xx raise :class:`ApiException` as the
    generated method does."""

    def __init__(self, api: kube_client.CoreV1Api, timeout: float = 10.0) -> None:
        self.api = api
        self.timeout = timeout
        client = api.api_client
        self._configuration = client.configuration
        self._pool: Any = client.rest_client.pool_manager
        self._headers = {
            **client.default_headers,
            "Accept": "application/json",
            "Content-Type": "application/json",
        }
        self._auth: tuple[float, dict[str, str]] = (-AUTH_REFRESH, {})
        self._server_of: tuple[str, Any, str] | None = None  # host, its pool, its path

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            self._post(f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}/binding", body)
        except ApiException as error:
            # 409: already bound. If to this node, an earlier attempt of this very bind landed
            # (the client resends a POST whose connection broke after the server took it).
            if error.status == 409 and self._bound_to(namespace, name, uid) == node:
                return
            raise

    def _credentials(self) -> dict[str, str]:
        """The configuration's auth headers, read again at most every AUTH_REFRESH seconds:
        reading them runs the kubeconfig loader's refresh hook, which sets the whole
        configuration again (0.2 ms a call, as much as the rest of the POST)."""
        now = time.monotonic()
        read_at, headers = self._auth
        if now - read_at >= AUTH_REFRESH:
            headers = {
                setting["key"]: setting["value"]
                for setting in self._configuration.auth_settings().values()
                if setting["in"] == "header" and setting["value"]
            }
            self._auth = (now, headers)
        return headers

    def _server(self) -> tuple[Any, str]:
        """The client's connection pool of the configured server and the server's path prefix,
        looked up again only when the host changed or its pool was closed (the pool manager's
        lookup parses the URL and builds a pool key: a fifth of a request's client CPU)."""
        host = self._configuration.host
        known = self._server_of
        if known is not None and known[0] == host and known[1].pool is not None:
            return known[1], known[2]
        pool = self._pool.connection_from_url(host)
        base = urlsplit(host).path.rstrip("/")
        self._server_of = (host, pool, base)
        return pool, base

    def _post(self, path: str, body: Mapping[str, Any]) -> None:
        data = json.dumps(body).encode()
        headers = {**self._headers, **self._credentials()}
        pool, base = self._server()
        answer = _kept_alive(pool, "POST", base + path, data, headers, self.timeout)
        if answer is None:  # no live kept-alive connection (or a proxy): urllib3's own path
            self._request("POST", path, data)
            return
        status, reason, content = answer
        if not 200 <= status < 300:
            raise ApiException(
                status=status, reason=reason, body=content.decode("utf-8", "replace")
            )

    def _request(self, method: str, path: str, body: bytes | None = None) -> bytes:
        """One request through the client's pool with its current credentials; the body of
        a 2xx answer, else :class:`ApiException`."""
        headers = {**self._headers, **self._credentials()}
        pool, base = self._server()
        response = pool.urlopen(
            method,
            base + path,
            body=body,
            headers=headers,
            timeout=self.timeout,
            preload_content=True,  # read whole: the connection goes back to the pool
        )
        if not 200 <= response.status < 300:
            raise ApiException(
                status=response.status,
                reason=response.reason,
                body=response.data.decode("utf-8", "replace"),
            )
        data: bytes = response.data
        return data

    def _bound_to(self, namespace: str, name: str, uid: str) -> str:
        pod = self.read_pod(namespace, name)
        metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
        return str(spec.get("nodeName") or "") if metadata.get("uid") == uid else ""

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The pod as the API server holds it now (a GET as ``read_namespaced_pod`` sends,
        without its argument validation: 0.8 ms of CPU a call, more than the rest of it)."""
        data = self._request("GET", f"/api/v1/namespaces/{quote(namespace)}/pods/{quote(name)}")
        value = json.loads(data)
        if not isinstance(value, Mapping):
            raise ValueError("the API server's pod is not an object")
        return value


def _kept_alive(
    pool: Any, method: str, url: str, body: bytes, headers: Mapping[str, str], timeout: float
) -> tuple[int, str, bytes] | None:
    """One request on a live kept-alive connection of urllib3's ``pool`` (its TLS set up when
    the pool connected it), written and read by ``http.client`` itself, without urllib3's
    request and response layers (its timeout, retry and header objects: a Binding's client
    CPU 145 -> 87 us, ``http.client`` alone ~63). ``None``, touching nothing, when the pool
    holds no live connection or goes through a proxy: urllib3's own ``urlopen`` then
    connects (and retries the connection) as before. An error once the request is being
    written raises, closing the connection, as urllib3 does for a POST (its ``Retry`` resends
    no POST after a read error): the caller then finds out where the pod is."""
    if getattr(pool, "proxy", None) is not None or not hasattr(pool, "_put_conn"):
        return None  # (a proxy; or a urllib3 without these private methods: its public path)
    conn = pool._get_conn()  # a live one, or a new one not connected yet
    if conn.sock is None:
        pool._put_conn(conn)
        return None
    try:
        conn.timeout = timeout
        conn.sock.settimeout(timeout)
        http.client.HTTPConnection.request(conn, method, url, body, dict(headers))
        response = http.client.HTTPConnection.getresponse(conn)
        content = response.read()
        answer = response.status, response.reason, content
    except BaseException:
        conn.close()
        raise
    finally:
        pool._put_conn(conn)
    return answer
