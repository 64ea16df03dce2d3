"""The TSDB source's headers, bearer token, basic auth, TLS and tenant, against real servers.

A real VictoriaMetrics started with ``-tls`` and ``-httpAuth.*`` checks basic auth and server TLS
(it has no client-certificate check in its open-source build); a small local HTTP(S) server shows
what peerwatch sends (headers, tokens, tenant paths) and checks client certificates.
Certificates are made here with openssl (synthetic, one day).
"""

from __future__ import annotations

import http.server
import json
import os
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from peerwatch.alarms.errors import ConfigError
from peerwatch.cli import app
from peerwatch.model import ProblemLog
from peerwatch.service.config import TsdbAccessConfig, config_from_dict, load_http_config
from peerwatch.sources.tsdb import TSDBClient, TSDBError
from peerwatch.sources.tsdb_http import BasicAuth, HttpOptions, TlsOptions
from services import Service, StartError, free_port, require_binary

pytestmark = pytest.mark.services

USER, PASSWORD = "reader", "s3cret-Pa55"
T0 = 1_764_460_800


def openssl(*args: str) -> None:
    subprocess.run([require_binary("openssl"), *args], check=True, capture_output=True)


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A CA, a server certificate for the name ``peerwatch-vm`` only (not 127.0.0.1), and a client certificate."""
    d = tmp_path_factory.mktemp("pki")
    ca, ca_key = d / "ca.pem", d / "ca.key"
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(ca_key), "-out", str(ca),
            "-days", "1", "-subj", "/CN=peerwatch test CA")  # fmt: skip
    for name, san in (("server", "subjectAltName=DNS:peerwatch-vm"), ("client", "extendedKeyUsage=clientAuth")):
        key, csr, cert, ext = d / f"{name}.key", d / f"{name}.csr", d / f"{name}.pem", d / f"{name}.ext"
        ext.write_text(san + "\n")
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key), "-CAcreateserial",
                "-out", str(cert), "-days", "1", "-extfile", str(ext))  # fmt: skip
    return Pki(ca, d / "server.pem", d / "server.key", d / "client.pem", d / "client.key")


@pytest.fixture(scope="module")
def secure_vm(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A VictoriaMetrics on https with basic auth, holding one synthetic series; its https URL."""
    workdir = tmp_path_factory.mktemp("secure-vm")
    binary = require_binary("victoria-metrics")
    port = free_port()
    argv = [binary, f"-httpListenAddr=127.0.0.1:{port}", f"-storageDataPath={workdir / 'data'}",
            "-retentionPeriod=100y", "-search.latencyOffset=0s", "-search.disableCache", "-loggerLevel=WARN",
            f"-httpAuth.username={USER}", f"-httpAuth.password={PASSWORD}",
            "-tls", f"-tlsCertFile={pki.server_cert}", f"-tlsKeyFile={pki.server_key}"]  # fmt: skip
    log_path = workdir / "vm.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    service = Service("victoria-metrics", f"https://127.0.0.1:{port}", proc, log_path)
    try:
        with httpx.Client(verify=False, auth=(USER, PASSWORD), timeout=5.0) as client:
            _wait_ready(service, client)
            lines = [
                {"metric": {"__name__": "pw_access_probe", "instance": f"n{i}:9100", "job": "node"},
                 "values": [float(i + k) for k in range(10)], "timestamps": [(T0 + 30 * k) * 1000 for k in range(10)]}
                for i in range(3)
            ]  # fmt: skip
            body = "".join(json.dumps(line) + "\n" for line in lines)
            assert client.post(service.url + "/api/v1/import", content=body).status_code == 204
            deadline = time.monotonic() + 20
            while True:
                client.get(service.url + "/internal/force_flush")
                resp = client.get(service.url + "/api/v1/series", params={"match[]": "pw_access_probe", "start": "1"})
                if resp.json().get("data"):
                    break
                assert time.monotonic() < deadline, f"import not visible:\n{service.log_tail()}"
                time.sleep(0.2)
        yield service.url
    finally:
        service.stop()


def _wait_ready(service: Service, client: httpx.Client) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if service.proc.poll() is not None:
            raise StartError(f"victoria-metrics exited at start-up:\n{service.log_tail()}")
        try:
            if client.get(service.url + "/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise StartError(f"victoria-metrics with TLS not ready:\n{service.log_tail()}")


def _read(url: str, http: HttpOptions) -> tuple[int, ProblemLog]:
    problems = ProblemLog()
    with TSDBClient(url, http=http, problems=problems, retries=0) as client:
        blocks = list(client.read(["pw_access_probe"], T0, T0 + 600))
    return len(blocks), problems


TLS = TlsOptions(server_name="peerwatch-vm")


def test_basic_auth_over_tls_is_accepted(secure_vm: str, pki: Pki) -> None:
    tls = TlsOptions(ca_file=pki.ca, server_name="peerwatch-vm")
    n, problems = _read(secure_vm, HttpOptions(basic_auth=BasicAuth(USER, PASSWORD), tls=tls))
    assert (n, problems.problems) == (3, [])


def test_wrong_password_is_refused_and_never_shown(secure_vm: str, pki: Pki) -> None:
    tls = TlsOptions(ca_file=pki.ca, server_name="peerwatch-vm")
    with pytest.raises(TSDBError) as err:
        _read(secure_vm, HttpOptions(basic_auth=BasicAuth(USER, "wrong-Pa55"), tls=tls))
    assert err.value.status == 401
    with pytest.raises(TSDBError) as err2:  # a password in the URL is masked in the message
        _read(secure_vm.replace("https://", f"https://{USER}:wrong-Pa55@"), HttpOptions(tls=tls))
    assert err2.value.status == 401 and "wrong-Pa55" not in str(err2.value) and f"{USER}:***@" in str(err2.value)


def test_password_file_is_read_again_when_it_changes(secure_vm: str, pki: Pki, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text("old-password\n")
    options = HttpOptions(basic_auth=BasicAuth(USER, password_file=secret), tls=TlsOptions(ca_file=pki.ca,
                          server_name="peerwatch-vm"))  # fmt: skip
    with TSDBClient(secure_vm, http=options, retries=0) as client:
        with pytest.raises(TSDBError, match="HTTP 401"):
            client.metric_names()
        secret.write_text(PASSWORD + "\n")
        os.utime(secret, ns=(time.time_ns(), time.time_ns() + 10**9))  # a new mtime even on a coarse clock
        assert "pw_access_probe" in client.metric_names()
        secret.unlink()
        with pytest.raises(TSDBError, match=r"basic_auth.password_file: cannot read .*password"):
            client.metric_names()


def test_tls_needs_the_ca_and_the_certificate_name(secure_vm: str, pki: Pki) -> None:
    auth = BasicAuth(USER, PASSWORD)
    with pytest.raises(TSDBError, match="CERTIFICATE_VERIFY_FAILED"):  # the system CAs do not know the test CA
        _read(secure_vm, HttpOptions(basic_auth=auth, tls=TLS))
    with pytest.raises(TSDBError, match="CERTIFICATE_VERIFY_FAILED"):  # 127.0.0.1 is not the certificate's name
        _read(secure_vm, HttpOptions(basic_auth=auth, tls=TlsOptions(ca_file=pki.ca)))
    assert _read(secure_vm, HttpOptions(basic_auth=auth, tls=TlsOptions(insecure_skip_verify=True)))[0] == 3


def test_cli_reads_the_http_config_file(secure_vm: str, pki: Pki, tmp_path: Path) -> None:
    (tmp_path / "password").write_text(PASSWORD)
    config = tmp_path / "tsdb-http.yaml"
    config.write_text(
        f"basic_auth: {{username: {USER}, password_file: password}}\n"
        f"tls_config: {{ca_file: {pki.ca}, server_name: peerwatch-vm}}\n"
    )
    args = ["catalog", "--json", "--start", str(T0), "--end", str(T0 + 600), secure_vm]
    result = CliRunner().invoke(app, [*args, "--http-config-file", str(config)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["series"] == 3 and report["problem_count"] == 0
    refused = CliRunner().invoke(app, args)  # without the file: the test CA is unknown, nothing read
    assert refused.exit_code != 0 and "CERTIFICATE_VERIFY_FAILED" in refused.output
    config.write_text("basic_auth: {username: x}\n")
    bad = CliRunner().invoke(app, [*args, "--http-config-file", str(config)])
    assert bad.exit_code == 2 and "basic_auth: give password or password_file" in bad.output


# -- what is sent: a local server that records requests -----------------------------------------


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: list[tuple[str, dict[str, str]]]

    def do_GET(self) -> None:
        self.seen.append((self.path.split("?")[0], {k.lower(): v for k, v in self.headers.items()}))
        body = b'{"status":"success","data":[]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def recorder() -> Iterator[tuple[str, list[tuple[str, dict[str, str]]]]]:
    seen: list[tuple[str, dict[str, str]]] = []
    handler = type("H", (Recorder,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_headers_and_bearer_token_are_sent(recorder: tuple[str, list[Any]], tmp_path: Path) -> None:
    url, seen = recorder
    options = HttpOptions(headers={"X-Scope-OrgID": "team-a"}, bearer_token="tok-inline")
    with TSDBClient(url, kind="prometheus", http=options) as client:
        client.metric_names()
    assert seen[-1][1]["x-scope-orgid"] == "team-a" and seen[-1][1]["authorization"] == "Bearer tok-inline"
    token = tmp_path / "token"
    token.write_text("tok-one\n")
    with TSDBClient(url, kind="prometheus", http=HttpOptions(bearer_token_file=token)) as client:
        client.metric_names()
        token.write_text("tok-two-rotated\n")
        os.utime(token, ns=(time.time_ns(), time.time_ns() + 10**9))
        client.metric_names()
    assert [h["authorization"] for _, h in seen[-2:]] == ["Bearer tok-one", "Bearer tok-two-rotated"]


@pytest.mark.parametrize(("tenant", "root"), [("0", "/select/0/prometheus"), ("12:34", "/select/12:34/prometheus")])
def test_tenant_path_on_vmselect(recorder: tuple[str, list[Any]], tenant: str, root: str) -> None:
    url, seen = recorder
    with TSDBClient(url + "/", http=HttpOptions(tenant=tenant)) as client:
        assert client.kind == "victoriametrics"  # detected through the tenant's export API
        client.series("up", T0, T0 + 60)
    assert [p for p, _ in seen] == [root + "/api/v1/export", root + "/api/v1/series"]


def test_client_certificate_for_mutual_tls(pki: Pki, tmp_path: Path) -> None:
    seen: list[tuple[str, dict[str, str]]] = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("H", (Recorder,), {"seen": seen}))
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca))
    ctx.load_cert_chain(str(pki.server_cert), str(pki.server_key))
    ctx.verify_mode = ssl.CERT_REQUIRED
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{server.server_address[1]}"
    try:
        mtls = TlsOptions(pki.ca, pki.client_cert, pki.client_key, server_name="peerwatch-vm")
        with TSDBClient(url, kind="prometheus", http=HttpOptions(tls=mtls), retries=0) as client:
            assert client.metric_names() == [] and len(seen) == 1
        no_cert = TlsOptions(ca_file=pki.ca, server_name="peerwatch-vm")
        with (
            TSDBClient(url, kind="prometheus", http=HttpOptions(tls=no_cert), retries=0) as client,
            pytest.raises(TSDBError),
        ):
            client.metric_names()
        assert len(seen) == 1
        with pytest.raises(TSDBError, match=r"cert_file/key_file: cannot use"):
            TSDBClient(url, http=HttpOptions(tls=TlsOptions(cert_file=pki.client_cert, key_file=pki.server_key)))
    finally:
        server.shutdown()
        server.server_close()


# -- configuration ------------------------------------------------------------------------------


def _tsdb(**extra: Any) -> dict[str, Any]:
    return {"source": {"tsdb": {"url": "https://vm.example:8481", **extra}}}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"bearer_token": "a", "basic_auth": {"username": "u", "password": "p"}}, "not bearer_token and basic_auth"),
        ({"basic_auth": {"username": "u"}}, "source.tsdb.basic_auth: give password or password_file"),
        ({"tls_config": {"cert_file": "c.pem"}}, "cert_file and key_file go together"),
        ({"tenant": "team-a"}, "source.tsdb.tenant: tenant is accountID or accountID:projectID"),
        ({"tenant": 1, "url": "http://vmselect:8481/select/0/prometheus"}, "the URL already names a tenant"),
        ({"headers": {"Authorization": "Bearer x"}, "bearer_token": "y"}, "an Authorization header and bearer_token"),
        ({"tls_config": {"ca_fil": "x"}}, "source.tsdb.tls_config.ca_fil: unknown setting"),
    ],
)
def test_bad_access_settings_are_named(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config_from_dict(_tsdb(**extra), "x.yaml")


def test_access_settings_become_options(tmp_path: Path) -> None:
    config = config_from_dict(
        _tsdb(url="https://u:pw@vm:8481", tenant=3, bearer_token_file="tok", tls_config={"ca_file": "ca.pem"}),
        "x.yaml",
        base=tmp_path,
    )
    tsdb = config.source.tsdb
    assert tsdb is not None
    options = tsdb.http_options()
    assert options.tenant == "3" and options.bearer_token_file == tmp_path / "tok"
    assert options.tls == TlsOptions(ca_file=tmp_path / "ca.pem")
    assert config.source.describe() == "https://u:***@vm:8481/select/3/prometheus"
    (tmp_path / "h.yaml").write_text("headers: {X-A: b}\ntenant: '1:2'\n")
    assert load_http_config(tmp_path / "h.yaml") == HttpOptions(headers={"X-A": "b"}, tenant="1:2")
    assert set(TsdbAccessConfig.model_fields) < set(type(tsdb).model_fields)


def test_an_unusable_ca_file_is_a_configuration_error(tmp_path: Path) -> None:
    from peerwatch.service.live_sources import TsdbSource

    config = config_from_dict(_tsdb(tls_config={"ca_file": "missing-ca.pem"}), "x.yaml", base=tmp_path)
    assert config.source.tsdb is not None
    with pytest.raises(ConfigError, match=r"source.tsdb: tls_config.ca_file: cannot use .*missing-ca.pem"):
        TsdbSource(config.source.tsdb, 30.0, 7200.0)


def test_secret_query_parameters_are_masked() -> None:
    from peerwatch.redact import redact_url

    assert redact_url("https://vm:8481/select/0/prometheus?authKey=k3y&extra_label=a") == (
        "https://vm:8481/select/0/prometheus?authKey=***&extra_label=a"
    )
    assert redact_url("postgresql://ops:pw@db/peerwatch?password=x") == "postgresql://ops:***@db/peerwatch?password=***"


def test_serve_check_reads_through_auth_and_tls_and_never_prints_the_secret(
    secure_vm: str, pki: Pki, tmp_path: Path
) -> None:
    (tmp_path / "pw").write_text(PASSWORD)
    tls = f"    tls_config: {{ca_file: {pki.ca}, server_name: peerwatch-vm}}\nstore: {{sqlite: {tmp_path}/s.sqlite}}\n"
    config = tmp_path / "pw.yaml"
    config.write_text(
        f"source:\n  tsdb:\n    url: {secure_vm}\n    basic_auth: {{username: {USER}, password_file: pw}}\n" + tls
    )
    ok = CliRunner().invoke(app, ["serve", "--config", str(config), "--check"])
    assert ok.exit_code == 0 and f"the source answers ({secure_vm})" in ok.output, ok.output
    in_url = secure_vm.replace("https://", f"https://{USER}:wrong-Pa55@")
    config.write_text(f"source:\n  tsdb:\n    url: {in_url}\n" + tls)
    refused = CliRunner().invoke(app, ["serve", "--config", str(config), "--check"])
    assert refused.exit_code == 1 and "HTTP 401" in refused.output, refused.output
    assert f"{USER}:***@" in refused.output and "wrong-Pa55" not in refused.output


def test_analyze_never_prints_a_password_given_in_the_url(tmp_path: Path) -> None:
    url = f"http://ops:pw-{PASSWORD}@127.0.0.1:{free_port()}"  # nothing listens there
    result = CliRunner().invoke(app, ["analyze", url, "--out", str(tmp_path / "alarms.jsonl")])
    assert result.exit_code == 1 and "ops:***@127.0.0.1" in result.output, result.output
    assert PASSWORD not in result.output
