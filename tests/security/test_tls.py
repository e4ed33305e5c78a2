"""TLS built in, and a CLI that knows its collector (issue 31, items 6 and 7).

TLS: ``agentreplay init --production --tls`` makes a private CA and a server certificate, the real collector
serves every listener (OTLP/gRPC, OTLP/HTTP, the control endpoint) with them, and an agent using the real
``openai`` client, run under the real launcher with the printed environment, is recorded over TLS (gRPC and
HTTP) and authorized over TLS; a client that trusts another CA, or none, is refused; with ``client_ca_file`` a
client without a certificate is refused. Each ``tls`` setting is checked when the config is read.

The CLI's collector: ``init`` pins the collector (its log key, and the CA with TLS) in the CLI's lines, and the
CLI sends the admin token only to a collector that proves it. A server on the collector's port that answers
200 to everything, a server with another certificate, or nothing at all: ``agentreplay kill`` fails in one
line, exit 2, and the impostor never sees the admin token.
"""

from __future__ import annotations

import json
import ssl
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from cryptography import x509
from production import Deployment, clean_env, deploy, port, sh

from agentreplay_client.errors import ConfigError
from agentreplay_collector.config import parse_config
from agentreplay_dev.collector import (
    EXPORT_METHOD,
    CollectorProcess,
    record_request,
    write_config,
)
from agentreplay_dev.llm_server import LLMServer, ScriptedReply, ToolCallSpec
from agentreplay_replay.cli import _certs

pytestmark = pytest.mark.e2e
BIN = Path(sys.executable).parent
AGENT = Path(__file__).parent / "agents" / "tls_agent.py"
def run_agent(deployment: Deployment, ledger: Path, llm: LLMServer, *, extra: str = "") -> subprocess.CompletedProcess[str]:
    """The TLS test agent (the real openai client) under the launcher, with the printed lines."""
    return deployment.run_agent(AGENT, {"LEDGER": str(ledger), "OPENAI_BASE_URL": llm.base_url_openai,
                                        "OTEL_BSP_SCHEDULE_DELAY": "100"}, extra=extra)


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from deploy(tmp_path_factory.mktemp("tls"), "--tls")


@pytest.fixture(scope="module")
def llm() -> Iterator[LLMServer]:
    with LLMServer(lambda request: ScriptedReply(tool_calls=[ToolCallSpec("book", {"flight": "TP123"})])) as server:
        yield server


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA that issued nothing the collector serves."""
    where = tmp_path_factory.mktemp("other-ca")
    _certs.make_ca("someone else's CA").write(where / "ca.pem", where / "ca.key")
    return where / "ca.pem"


def run_of(agent: subprocess.CompletedProcess[str]) -> str:
    assert agent.returncode == 0, agent.stdout + agent.stderr
    return agent.stdout.split("run ", 1)[1].split()[0]


def wait_for_verdict(control: str, run_id: str, token: str, context: ssl.SSLContext) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        status, doc = https_json(f"{control}/v1/runs/{run_id}/chain", context, token=token)
        if status == 200 and doc["status"] != "pending":
            return doc
        assert time.monotonic() < deadline, (status, doc)
        time.sleep(0.2)


def https_json(url: str, context: ssl.SSLContext, *, token: str | None = None) -> tuple[int, Any]:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, None


def export_secure(endpoint: str, *, root: bytes | None, chain: tuple[bytes, bytes] | None = None) -> grpc.StatusCode:
    """One raw OTLP/gRPC export over TLS, trusting ``root`` (None: the system's CAs), with a client certificate."""
    creds = grpc.ssl_channel_credentials(root, *(chain or (None, None)))
    with grpc.secure_channel(endpoint, creds) as channel:
        try:
            channel.unary_unary(EXPORT_METHOD)(record_request(runs=1).SerializeToString(), timeout=10)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


# --- the settings ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA, a server certificate for loopback, a client certificate, and a key that matches neither."""
    where = tmp_path_factory.mktemp("pki")
    ca = _certs.make_ca("test CA")
    ca.write(where / "ca.pem", where / "ca.key")
    _certs.issue(ca, "collector", names=["localhost", "127.0.0.1"]).write(where / "server.pem", where / "server.key")
    _certs.issue(ca, "operator", server=False).write(where / "client.pem", where / "client.key")
    _certs.make_ca("stray").write(where / "stray.pem", where / "stray.key")
    (where / "garbage.key").write_text("not a key\n")
    (where / "garbage.key").chmod(0o600)
    return {p.stem + p.suffix.replace(".", "_"): p for p in where.iterdir()}


def tls_config(tmp: Path, tls: dict[str, Any], *, where: tuple[str, ...] = ("grpc", "http", "control"),
               **kwargs: Any) -> dict[str, Any]:
    doc = yaml.safe_load(write_config(tmp / "c.yaml", store=f"chdb://{tmp}/store", **kwargs).read_text())
    for name in where:
        target = doc["extensions"]["agentreplay_control"] if name == "control" else \
            doc["receivers"]["otlp"]["protocols"][name]
        target["tls"] = tls
    return doc


@pytest.mark.parametrize(("case", "key", "expected"), [
    ("missing cert", "receivers.otlp.protocols.grpc.tls.cert_file", "does not exist"),
    ("no key", "receivers.otlp.protocols.grpc.tls.key_file", "cert_file and key_file together"),
    ("garbage key", "receivers.otlp.protocols.grpc.tls.key_file", "holds no PEM block"),
    ("key of another cert", "receivers.otlp.protocols.grpc.tls.key_file", "matches cert_file"),
    ("key is a folder", "receivers.otlp.protocols.grpc.tls.key_file", "a readable file"),
    ("version 1.1", "receivers.otlp.protocols.grpc.tls.min_version", '"1.2" or "1.3"'),
    ("version 2", "receivers.otlp.protocols.grpc.tls.min_version", '"1.2" or "1.3"'),
    ("1.3 on grpc", "receivers.otlp.protocols.grpc.tls.min_version", "grpcio"),
    ("client ca garbage", "receivers.otlp.protocols.grpc.tls.client_ca_file", "holds no PEM block"),
    ("unknown key", "receivers.otlp.protocols.grpc.tls.ca_file", "unknown key"),
])
def test_each_tls_setting_is_checked_when_the_config_is_read(
    pki: dict[str, Path], tmp_path: Path, case: str, key: str, expected: str
) -> None:
    good = {"cert_file": str(pki["server_pem"]), "key_file": str(pki["server_key"])}
    bad: dict[str, Any] = {
        "missing cert": good | {"cert_file": str(tmp_path / "nope.pem")},
        "no key": {"cert_file": good["cert_file"]},
        "garbage key": good | {"key_file": str(pki["garbage_key"])},
        "key of another cert": good | {"key_file": str(pki["stray_key"])},
        "key is a folder": good | {"key_file": str(tmp_path)},
        "version 1.1": good | {"min_version": "1.1"},
        "version 2": good | {"min_version": 2},
        "1.3 on grpc": good | {"min_version": "1.3"},
        "client ca garbage": good | {"client_ca_file": str(pki["garbage_key"])},
        "unknown key": good | {"ca_file": good["cert_file"]},
    }[case]
    with pytest.raises(ConfigError) as raised:
        parse_config(tls_config(tmp_path, bad, where=("grpc",)), {})
    assert raised.value.path == key, str(raised.value)
    assert expected in str(raised.value), str(raised.value)


def test_good_settings_load_and_1_3_is_taken_where_it_can_be_enforced(pki: dict[str, Path], tmp_path: Path) -> None:
    good = {"cert_file": str(pki["server_pem"]), "key_file": str(pki["server_key"]),
            "client_ca_file": str(pki["ca_pem"])}
    config = parse_config(tls_config(tmp_path, good), {})
    assert config.otlp.grpc is not None and config.otlp.grpc.tls is not None and config.otlp.grpc.tls.mutual
    assert config.control is not None and config.control.tls is not None
    config = parse_config(tls_config(tmp_path, good | {"min_version": "1.3"}, where=("http", "control")), {})
    assert config.otlp.http is not None and config.otlp.http.tls is not None
    assert config.otlp.http.tls.min_version == "1.3" and config.otlp.grpc is not None and config.otlp.grpc.tls is None


def test_a_tls_key_others_may_open_stops_the_collector(pki: dict[str, Path], tmp_path: Path) -> None:
    key = tmp_path / "open.key"
    key.write_bytes(pki["server_key"].read_bytes())
    key.chmod(0o644)
    doc = tls_config(tmp_path, {"cert_file": str(pki["server_pem"]), "key_file": str(key)})
    with pytest.raises(ConfigError) as raised:
        parse_config(doc, {})
    assert raised.value.path == "receivers.otlp.protocols.grpc.tls.key_file" and "chmod 600" in str(raised.value)
    assert parse_config(doc, {}, strict=False).secret_files  # --validate names it instead (one line per key file)


def test_a_plaintext_listener_off_loopback_is_warned_at_start(pki: dict[str, Path], tmp_path: Path) -> None:
    from agentreplay_otel import identity

    org = identity.generate_key()
    identity.write_public_key(org.public_key(), tmp_path / "org.pub")
    config = write_config(tmp_path / "c.yaml", store=f"chdb://{tmp_path}/store", grpc="0.0.0.0:0",
                          org_public_key=tmp_path / "org.pub", open_reads=False)
    doc = yaml.safe_load(config.read_text())
    doc["receivers"]["otlp"]["protocols"]["http"]["tls"] = {"cert_file": str(pki["server_pem"]),
                                                            "key_file": str(pki["server_key"])}
    config.write_text(yaml.safe_dump(doc))
    with CollectorProcess(config) as collector:
        assert collector.endpoints["http"].startswith("https://")
    log = collector.log_path.read_text()
    assert "receivers.otlp.protocols.grpc listens on 0.0.0.0:0 in plaintext" in log, log
    assert "protocols.http listens" not in log and "agentreplay_control listens" not in log


# --- init --production --tls, the collector it configures, an agent over TLS ----------------------------------
def test_init_tls_writes_a_ca_and_a_server_certificate_for_the_collectors_names(tls: Deployment) -> None:
    folder = tls.dir / "tls"
    for secret in ("ca.key", "server.key"):
        assert stat.S_IMODE((folder / secret).stat().st_mode) == 0o600, secret
    ca = x509.load_pem_x509_certificate((folder / "ca.pem").read_bytes())
    server = x509.load_pem_x509_certificate((folder / "server.pem").read_bytes())
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    server.verify_directly_issued_by(ca)
    names = server.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    shown = {str(n) for n in names.get_values_for_type(x509.IPAddress)} | set(names.get_values_for_type(x509.DNSName))
    assert {"127.0.0.1", "localhost"} <= shown
    checked = subprocess.run([str(BIN / "agentreplay"), "init", "--validate", str(tls.dir / "otel-collector.yaml")],
                             env=clean_env(), capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0 and "nothing insecure" in checked.stdout, checked.stdout + checked.stderr
    assert all(collector.startswith("https://") for collector in tls.collector.endpoints.values())
    assert "OTEL_EXPORTER_OTLP_CERTIFICATE=" in tls.agent_env and "https://127.0.0.1:" in tls.agent_env
    assert f"AGENTREPLAY_CONTROL_CERTIFICATE={folder / 'ca.pem'}" in tls.cli_env


@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_an_openai_agent_records_over_tls_and_is_authorized_over_tls(
    tls: Deployment, llm: LLMServer, tmp_path: Path, protocol: str
) -> None:
    extra = ""
    if protocol != "grpc":
        extra = (f"export OTEL_EXPORTER_OTLP_PROTOCOL={protocol}\n"
                 f"export OTEL_EXPORTER_OTLP_ENDPOINT={tls.collector.http}")
    ledger = tmp_path / "ledger.txt"
    run_id = run_of(run_agent(tls, ledger, llm, extra=extra))
    assert ledger.read_text() == "TP123\n"  # Authorize (over TLS) allowed the booking
    context = ssl.create_default_context(cafile=str(tls.ca))
    verdict = wait_for_verdict(tls.collector.control, run_id, tls.admin_token, context)
    assert verdict["status"] == "intact", verdict
    listed = tls.cli("agentreplay runs --json")  # the CLI over TLS, with the lines init printed
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout
    verified = tls.cli(f"agentreplay verify {run_id}")
    assert verified.returncode == 0, verified.stdout + verified.stderr


def test_a_client_that_trusts_another_ca_is_refused(
    tls: Deployment, llm: LLMServer, other_ca: Path, tmp_path: Path
) -> None:
    assert export_secure(tls.collector.grpc, root=other_ca.read_bytes()) == grpc.StatusCode.UNAVAILABLE
    assert export_secure(tls.collector.grpc, root=None) == grpc.StatusCode.UNAVAILABLE  # the system's CAs
    with pytest.raises(urllib.error.URLError) as refused:
        https_json(f"{tls.collector.control}/v1/health", ssl.create_default_context(cafile=str(other_ca)))
    assert isinstance(refused.value.reason, ssl.SSLCertVerificationError)
    # the agent, told to trust another CA: its Authorize finds no collector it trusts, so the booking is refused
    ledger = tmp_path / "ledger.txt"
    agent = run_agent(tls, ledger, llm, extra=f"export OTEL_EXPORTER_OTLP_CERTIFICATE={other_ca}")
    assert not ledger.exists(), agent.stdout
    # the CLI, told to trust another CA: one line, exit 2
    cli = tls.cli("agentreplay kill --agent tls_agent", extra=f"export AGENTREPLAY_CONTROL_CERTIFICATE={other_ca}")
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert "not the pinned collector" in cli.stderr and "certificate does not verify" in cli.stderr, cli.stderr
    assert "halted" not in cli.stdout


def test_plaintext_to_a_tls_listener_is_refused(tls: Deployment) -> None:
    from agentreplay_dev.collector import export_grpc

    body = record_request(runs=1).SerializeToString()
    assert export_grpc(tls.collector.grpc, body, timeout_s=10) == grpc.StatusCode.UNAVAILABLE
    plain = tls.collector.control.replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"{plain}/v1/health", timeout=10).read()


def test_the_cli_kills_and_resumes_over_tls(tls: Deployment) -> None:
    run = "ab" * 16
    killed = tls.cli(f"agentreplay kill {run} --reason tls-test")
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert f"halted run {run}" in killed.stdout
    resumed = tls.cli(f"agentreplay resume {run}")
    assert resumed.returncode == 0 and f"resumed run {run}" in resumed.stdout, resumed.stdout + resumed.stderr


# --- mutual TLS ------------------------------------------------------------------------------------------------
def test_mutual_tls_refuses_a_client_without_a_certificate(pki: dict[str, Path], tmp_path: Path) -> None:
    served = {"cert_file": str(pki["server_pem"]), "key_file": str(pki["server_key"]),
              "client_ca_file": str(pki["ca_pem"])}
    config = tmp_path / "mtls.yaml"
    config.write_text(yaml.safe_dump(tls_config(tmp_path, served)))
    root, chain = pki["ca_pem"].read_bytes(), (pki["client_key"].read_bytes(), pki["client_pem"].read_bytes())
    with CollectorProcess(config) as collector:
        assert export_secure(collector.grpc, root=root) == grpc.StatusCode.UNAVAILABLE
        assert export_secure(collector.grpc, root=root, chain=chain) == grpc.StatusCode.OK
        anonymous = ssl.create_default_context(cafile=str(pki["ca_pem"]))
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            https_json(f"{collector.control}/v1/health", anonymous)
        with_cert = ssl.create_default_context(cafile=str(pki["ca_pem"]))
        with_cert.load_cert_chain(str(pki["client_pem"]), str(pki["client_key"]))
        assert https_json(f"{collector.control}/v1/health", with_cert)[0] == 200
        # the CLI: with its client certificate it reads; without, one line and exit 2
        env = {"AGENTREPLAY_COLLECTOR": collector.control, "AGENTREPLAY_CONTROL_CERTIFICATE": str(pki["ca_pem"])}
        client = {"AGENTREPLAY_CONTROL_CLIENT_CERTIFICATE": str(pki["client_pem"]),
                  "AGENTREPLAY_CONTROL_CLIENT_KEY": str(pki["client_key"])}
        refused = sh("agentreplay kill --agent a1", cwd=tmp_path, extra=env | {"AGENTREPLAY_ADMIN_TOKEN": "t" * 40})
        assert refused.returncode == 2 and "requires a client certificate" in refused.stderr, refused.stderr
        listed = sh("agentreplay runs --json", cwd=tmp_path, extra=env | client)
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert isinstance(json.loads(listed.stdout), list | dict)


# --- the CLI knows its collector ----------------------------------------------------------------------------------
@dataclass
class Impostor:
    """Whatever answers on the collector's port: 200 and ``{}`` to every request, each request kept."""

    port: int
    context: ssl.SSLContext | None = None
    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)

    def __enter__(self) -> Impostor:
        seen = self.seen

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                seen.append((self.command, self.path, dict(self.headers.items()), body))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = do_PUT = do_DELETE = answer

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        if self.context is not None:
            self.server.socket = self.context.wrap_socket(self.server.socket, server_side=True)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def got(self, secret: str) -> bool:
        """Whether any request carried ``secret`` anywhere (a header, the path, the body)."""
        return any(secret in path or secret in json.dumps(headers) or secret.encode() in body
                   for _, path, headers, body in self.seen)


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """``init --production`` without --tls: the collector pinned by its log key alone (loopback here)."""
    yield from deploy(tmp_path_factory.mktemp("plain"))


def test_the_cli_talks_to_its_pinned_collector(plain: Deployment) -> None:
    assert "AGENTREPLAY_COLLECTOR_IDENTITY=" in plain.cli_env
    killed = plain.cli(f"agentreplay kill {'cd' * 16} --reason pinned")
    assert killed.returncode == 0 and "halted run" in killed.stdout, killed.stdout + killed.stderr


def test_kill_sent_to_an_impostor_on_the_collectors_port_fails_and_the_token_never_leaves(
    plain: Deployment, tmp_path: Path
) -> None:
    control_port = int(port(plain.collector.control))
    plain.collector.stop()  # the collector is down; another process takes its port
    try:
        with Impostor(control_port) as impostor:
            killed = plain.cli(f"agentreplay kill {'ef' * 16} --reason impostor")
            listed = plain.cli("agentreplay alerts --json")
        assert killed.returncode == 2, killed.stdout + killed.stderr
        assert "halted" not in killed.stdout
        assert "not the pinned collector" in killed.stderr and "No token was sent" in killed.stderr, killed.stderr
        assert listed.returncode == 2 and "not the pinned collector" in listed.stderr, listed.stderr
        assert [(method, path) for method, path, _, _ in impostor.seen] == [("POST", "/v1/identity")] * 2
        assert not impostor.got(plain.admin_token)
        assert not any("authorization" in {k.lower() for k in headers} for _, _, headers, _ in impostor.seen)
        # nothing on the port at all: one line, exit 2, never "halted"
        gone = plain.cli(f"agentreplay kill {'ef' * 16}")
        assert gone.returncode == 2 and "no collector answers" in gone.stderr and "halted" not in gone.stdout, gone.stderr
    finally:
        plain.collector.start()


def test_an_impostor_with_its_own_certificate_never_gets_the_token(
    tls: Deployment, pki: dict[str, Path], tmp_path: Path
) -> None:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(pki["server_pem"]), str(pki["server_key"]))  # valid for 127.0.0.1, another CA
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    free = probe.server_address[1]
    probe.server_close()
    with Impostor(free, context=context) as impostor:
        cli = tls.cli("agentreplay kill --agent tls_agent",
                      extra=f"export AGENTREPLAY_COLLECTOR=https://127.0.0.1:{free}")
    assert cli.returncode == 2, cli.stdout + cli.stderr
    assert "certificate does not verify" in cli.stderr and "halted" not in cli.stdout, cli.stderr
    assert impostor.seen == []  # the handshake failed: no request, no token


def test_without_a_pin_a_loopback_server_that_confirms_nothing_fails_the_kill(tmp_path: Path) -> None:
    probe = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    free = probe.server_address[1]
    probe.server_close()
    with Impostor(free):
        cli = sh("agentreplay kill --agent a1", cwd=tmp_path,
                 extra={"AGENTREPLAY_COLLECTOR": f"http://127.0.0.1:{free}", "AGENTREPLAY_ADMIN_TOKEN": "t" * 40})
    assert cli.returncode == 2 and "did not confirm the halt" in cli.stderr and "halted" not in cli.stdout, cli.stderr


def test_a_token_never_goes_in_plaintext_off_loopback(tmp_path: Path) -> None:
    cli = sh("agentreplay kill --agent a1", cwd=tmp_path,
             extra={"AGENTREPLAY_COLLECTOR": "http://192.0.2.10:4320", "AGENTREPLAY_ADMIN_TOKEN": "t" * 40})
    assert cli.returncode == 2 and "refusing to send a token in plaintext" in cli.stderr, cli.stderr


def test_a_replay_is_recorded_over_tls_too(tls: Deployment, llm: LLMServer, tmp_path: Path) -> None:
    """``agentreplay replay`` with the CLI's lines and the agent's own: the replayed agent exports to the
    https endpoint the collector reports, checked against the CA the CLI is pinned to."""
    ledger = tmp_path / "ledger.txt"
    run_id = run_of(run_agent(tls, ledger, llm))
    context = ssl.create_default_context(cafile=str(tls.ca))
    wait_for_verdict(tls.collector.control, run_id, tls.admin_token, context)
    identity = "\n".join(line for line in tls.agent_env.splitlines()
                         if line.startswith(("export AGENTREPLAY_AGENT_KEY", "export AGENTREPLAY_IDENTITY",
                                             "export AGENTREPLAY_MANIFEST")))
    replayed = tls.cli(f"LEDGER={ledger} agentreplay replay {run_id} --json", extra=identity)
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    doc = json.loads(replayed.stdout)
    assert doc["replay_run"]["stored"] is True, doc["replay_run"]
    assert doc["report"]["outcome"] == "matched" and doc["report"]["live_calls"] == 0, doc["report"]
    assert ledger.read_text() == "TP123\n"  # the replay's booking was sandboxed
