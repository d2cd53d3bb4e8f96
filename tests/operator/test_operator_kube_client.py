"""The operator's API client over real TLS: CA from kubeconfig data, client certificates
(what kind and kubeadm clusters hand out), bearer tokens, error mapping."""
from __future__ import annotations

import base64
import shutil
import ssl
import subprocess
from pathlib import Path

import aiohttp
import aiohttp.web
import kopf
import pytest

from kubellm.operator.kube import ApiError, KubeClient

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None,
                                reason="needs the openssl command to make test certificates")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    """A CA, a server certificate for 127.0.0.1 and a client certificate, all CA-signed."""
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
             "ca.crt", "-days", "1", "-subj", "/CN=test-ca", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    for name in ("server", "client"):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out",
                 f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
                 "-CAcreateserial", "-out", f"{name}.crt", "-days", "1", "-extfile", "san.ext",
                 cwd=d)
    return d


@pytest.fixture()
async def api_server(pki):
    async def handler(request: aiohttp.web.Request) -> aiohttp.web.Response:
        if request.path.endswith("/missing"):
            return aiohttp.web.json_response({"kind": "Status", "message": "not found"},
                                             status=404)
        if request.method == "PATCH" and not request.path.endswith("/echo"):
            return aiohttp.web.json_response(
                {"kind": "Status", "message": "spec.replicas: Invalid value"}, status=422)
        peer = request.transport.get_extra_info("peercert") or {}
        subject = dict(x[0] for x in peer.get("subject", ()))
        return aiohttp.web.json_response({
            "authorization": request.headers.get("Authorization"),
            "client": subject.get("commonName"),
            "contentType": request.headers.get("Content-Type"),
            "query": dict(request.query)})

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(pki / "server.crt", pki / "server.key")
    ctx.verify_mode = ssl.CERT_OPTIONAL  # token-only clients are allowed too
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    yield f"https://127.0.0.1:{port}"
    await runner.cleanup()


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def test_client_certificate_and_ca_from_kubeconfig_data(pki, api_server):
    info = kopf.ConnectionInfo(server=api_server, ca_data=_b64(pki / "ca.crt"),
                               certificate_data=_b64(pki / "client.crt"),
                               private_key_data=_b64(pki / "client.key"))
    client = KubeClient(info)
    try:
        seen = await client.get("/api/v1/namespaces/ns/services/chat")
        assert seen["client"] == "client"
        assert await client.get("/api/v1/namespaces/ns/services/missing") is None
        with pytest.raises(ApiError, match="spec.replicas: Invalid value") as e:
            await client.apply("/apis/apps/v1/namespaces/ns/deployments/x", {"a": 1})
        assert e.value.status == 422
    finally:
        await client.close()


async def test_token_ca_path_and_patch_flavours(pki, api_server):
    info = kopf.ConnectionInfo(server=api_server, ca_path=str(pki / "ca.crt"), token="s3cret")
    client = KubeClient(info)
    try:
        seen = await client.list("/api/v1/namespaces/ns/services", "app=x")
        assert seen == []  # the echo has no items
        seen = await client.get("/api/v1/namespaces/ns/services/chat")
        assert seen["authorization"] == "Bearer s3cret" and seen["client"] is None
        seen = await client.apply("/apis/apps/v1/namespaces/ns/deployments/echo", {"a": 1})
        assert seen["contentType"] == "application/apply-patch+yaml"
        assert seen["query"] == {"fieldManager": "kubellm-operator", "force": "true"}
        seen = await client.merge_patch("/apis/x/v1/namespaces/ns/y/echo", {"s": 1})
        assert seen["contentType"] == "application/merge-patch+json"
    finally:
        await client.close()


async def test_an_unknown_ca_is_refused_unless_insecure(pki, api_server):
    strict = KubeClient(kopf.ConnectionInfo(server=api_server, token="t"))
    try:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await strict.get("/api/v1/namespaces/ns/services/chat")
    finally:
        await strict.close()
    insecure = KubeClient(kopf.ConnectionInfo(server=api_server, token="t", insecure=True))
    try:
        assert (await insecure.get("/api/v1/namespaces/ns/services/chat"))["authorization"] \
            == "Bearer t"
    finally:
        await insecure.close()
