"""Capacity attacks by senders who prove nothing (issue 39, items 1 and 5), against a collector set up
the way an operator sets one up: ``agentreplay init --production DIR --tls``, real TLS on every
listener, real gRPC, the real CLI with the lines ``init`` printed.

Before the fix, measured from outside:
* four TLS connections that send only ``POST /v1/identity`` with ``Content-Length: 16777216`` made the
  memory budget reserve their declared bytes before anyone was authenticated: every agent's Authorize
  answered 429, ``POST /v1/halts`` 429, ``agentreplay kill`` exited 2, for as long as the sockets stayed
  open; 520 connections sending ``POST /v1/traces`` heads of 256 KiB did the same to every agent's exports;
* 16 gRPC clients with no token sending 15 KB that inflate to 16 MiB grew the collector by 1.0-1.5 GB;
* a head sent a byte at a time, or a body declared and never sent, held its connection forever;
* each dropped connection wrote tracebacks to the log.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from production import Deployment, deploy, exported, sh

from agentreplay_dev.collector import EXPORT_METHOD, credential_headers, record_request
from agentreplay_otel import identity

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024


@dataclass
class Agent:
    agent_id: str
    token: str
    key: Any


@pytest.fixture(scope="module")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    yield from deploy(tmp_path_factory.mktemp("capacity"), "--tls", agent="ledger")


def issue(prod: Deployment, agent_id: str) -> Agent:
    """An agent issued with the commands ``init`` printed (the deployment's own, or another)."""
    if agent_id == "ledger":
        lines = exported(prod.agent_env)
    else:
        (prod.work / f"{agent_id}.manifest.json").write_text((prod.work / "ledger.manifest.json").read_text())
        keys = prod.dir / "keys"
        done = sh(f"{prod.cli_env}\nagentreplay manifest sign {agent_id}.manifest.json --keys {keys}\n"
                  f"agentreplay identity issue --agent {agent_id} --manifest {agent_id}.manifest.signed.json"
                  f" --keys {keys}", cwd=prod.work)
        assert done.returncode == 0, done.stderr
        lines = exported(done.stdout)
    token_ref = lines["AGENTREPLAY_IDENTITY"]
    token = Path(token_ref).read_text().strip() if Path(token_ref).is_file() else token_ref
    key_path = Path(lines["AGENTREPLAY_AGENT_KEY"])
    if not key_path.is_absolute():
        key_path = prod.work / key_path
    agent = Agent(agent_id, token, identity.load_private_key(key_path))
    signed = Path(lines["AGENTREPLAY_MANIFEST"])
    body = (signed if signed.is_absolute() else prod.work / signed).read_bytes()
    headers = {"content-type": "application/json",
               **credential_headers(agent.token, agent.key, "POST", "/v1/manifests", body)}
    status, answer = https(prod, "POST", f"{prod.collector.control}/v1/manifests", body, headers)
    assert status == 200, (status, answer)  # registered, as the SDK does when the agent starts
    return agent


def context(prod: Deployment) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(prod.ca))


def host_port(url: str) -> tuple[str, int]:
    host, _, port = url.split("://", 1)[-1].rpartition(":")
    return host, int(port)


def open_head(prod: Deployment, url: str, head: str) -> ssl.SSLSocket:
    """A TLS connection to ``url`` that has sent ``head`` (a request head, no body) and nothing more."""
    host, port = host_port(url)
    raw = socket.create_connection((host, port), timeout=10)
    sock = context(prod).wrap_socket(raw, server_hostname=host)
    sock.sendall(head.encode())
    return sock


def status_of(sock: ssl.SSLSocket, timeout_s: float = 5.0) -> int:
    """The status the collector answered on ``sock`` (0: closed without one; -1: nothing yet)."""
    sock.settimeout(timeout_s)
    try:
        head = sock.recv(64)
    except TimeoutError:
        return -1
    except (OSError, ssl.SSLError):
        return 0
    return int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else 0


def https(prod: Deployment, method: str, url: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context(prod)))
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with opener.open(request, timeout=30) as response:
            text = response.read()
            return response.status, json.loads(text) if text.strip() else None
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def authorize(prod: Deployment, agent: Agent) -> int:
    body = json.dumps({"kind": "tool", "tool": "book", "arguments": {}, "run_id": "ab" * 16}).encode()
    headers = {"content-type": "application/json",
               **credential_headers(agent.token, agent.key, "POST", "/v1/authorize", body)}
    return https(prod, "POST", f"{prod.collector.control}/v1/authorize", body, headers)[0]


def export_http(prod: Deployment, agent: Agent, runs: int = 1) -> tuple[int, Any]:
    body = record_request(runs=runs, agent_id=agent.agent_id).SerializeToString()
    headers = {"content-type": "application/x-protobuf",
               **credential_headers(agent.token, agent.key, "POST", "/v1/traces", body)}
    return https(prod, "POST", f"{prod.collector.http}/v1/traces", body, headers)


def channel(prod: Deployment, **kwargs: Any) -> grpc.Channel:
    creds = grpc.ssl_channel_credentials(prod.ca.read_bytes())
    target = prod.collector.grpc.split("://", 1)[-1]
    return grpc.secure_channel(target, creds, options=[("grpc.max_send_message_length", 64 * MIB)], **kwargs)


def export_grpc(prod: Deployment, agent: Agent | None, body: bytes, **kwargs: Any) -> grpc.StatusCode:
    metadata = list(credential_headers(agent.token, agent.key, "POST", "/v1/traces", body).items()) if agent else None
    with channel(prod, **kwargs) as chan:
        try:
            chan.unary_unary(EXPORT_METHOD)(body, metadata=metadata, timeout=30)
        except grpc.RpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


def memory_mb(pid: int) -> dict[str, int]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) // 1024
    return found


def head(method: str, path: str, length: int, extra: str = "") -> str:
    return (f"{method} {path} HTTP/1.1\r\nHost: collector\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {length}\r\n\r\n")


# --- item 1: idle heads -----------------------------------------------------------------------------------
def test_idle_heads_declaring_large_bodies_leave_the_control_plane_working(prod: Deployment) -> None:
    agent = issue(prod, "ledger")
    control = prod.collector.control
    idle = [open_head(prod, control, head("POST", "/v1/identity", 16 * MIB)) for _ in range(4)]
    idle += [open_head(prod, control, head("POST", "/v1/halts", 16 * MIB)) for _ in range(4)]
    idle += [open_head(prod, control, head("POST", "/v1/authorize", 4 * MIB, "Authorization: Bearer forged\r\n"))
             for _ in range(4)]
    try:
        time.sleep(0.5)
        assert authorize(prod, agent) == 200  # before: 429, every agent's, for as long as the sockets stayed open
        killed = prod.cli("agentreplay kill --agent nobody-in-particular --reason drill")
        assert killed.returncode == 0, killed.stdout + killed.stderr  # before: exit 2 (the halt answered 429)
        resumed = prod.cli("agentreplay resume --agent nobody-in-particular")
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        # each idle head was answered at once, unread: a challenge is small, a stranger's halt or a forged
        # Authorize is refused before its body
        statuses = [status_of(sock) for sock in idle]
        assert statuses[:4] == [413] * 4 and statuses[4:] == [401] * 8, statuses
    finally:
        for sock in idle:
            sock.close()
    _, stats = https(prod, "GET", f"{control}/v1/stats", None, {"authorization": f"Bearer {prod.admin_token}"})
    consumers = stats["memory"]["consumers"]
    assert consumers["strangers"]["refused_bytes"] == 0 and consumers["control"]["used_bytes"] == 0, consumers


def test_hundreds_of_idle_export_heads_do_not_refuse_an_agents_exports(prod: Deployment) -> None:
    agent = issue(prod, "ledger")
    http = prod.collector.http
    with ThreadPoolExecutor(16) as pool:
        idle = list(pool.map(lambda _: _try_open(prod, http, head("POST", "/v1/traces", 256 * 1024)), range(520)))
    opened = [sock for sock in idle if sock is not None]
    try:
        time.sleep(0.5)
        assert export_http(prod, agent)[0] == 200, export_http(prod, agent)  # before: 429 while the heads held 520 x 1 MiB of the budget
        assert export_grpc(prod, agent, record_request(runs=1, agent_id="ledger").SerializeToString()).name == "OK"
        statuses = [status_of(sock, 2.0) for sock in opened[:20]]
        assert set(statuses) <= {401, 0}, statuses  # refused, unread, or closed past the address's cap
    finally:
        for sock in opened:
            sock.close()


def _try_open(prod: Deployment, url: str, text: str) -> ssl.SSLSocket | None:
    try:
        return open_head(prod, url, text)
    except OSError:
        return None  # closed past the address's cap before TLS finished


def test_one_agents_stalled_bodies_do_not_refuse_another_agents_exports(prod: Deployment) -> None:
    """An authenticated sender's reservation is its own: it fills its part of the share, not the share."""
    greedy, other = issue(prod, "ledger"), issue(prod, "other")
    body_size = 15 * MIB
    stalled = []
    for _ in range(12):  # 12 x 4 x 15 MiB: past the exports' whole share at this machine's limit
        proof_headers = credential_headers(greedy.token, greedy.key, "POST", "/v1/traces", b"x" * body_size)
        extra = "".join(f"{k}: {v}\r\n" for k, v in proof_headers.items())
        stalled.append(open_head(prod, prod.collector.http, head("POST", "/v1/traces", body_size, extra)
                                 .replace("application/json", "application/x-protobuf")))
    try:
        time.sleep(0.5)
        assert export_http(prod, other)[0] == 200, export_http(prod, other)
        assert export_grpc(prod, other, record_request(runs=1, agent_id="other").SerializeToString()).name == "OK"
        statuses = [status_of(sock, 0.2) for sock in stalled]
        assert statuses.count(429) >= 1, statuses  # past its own part, the greedy agent is told to retry
    finally:
        for sock in stalled:
            sock.close()


# --- item 2: compressed gRPC with no token ------------------------------------------------------------------
def test_compressed_grpc_without_a_token_is_refused_before_it_is_inflated(prod: Deployment) -> None:
    pid = prod.collector.proc.pid
    before = memory_mb(pid)
    bomb = bytes(16 * MIB - 4096)  # about 16 KB once gzipped
    stop = threading.Event()
    codes: list[grpc.StatusCode] = []

    def send() -> None:
        while not stop.is_set():
            codes.append(export_grpc(prod, None, bomb, compression=grpc.Compression.Gzip))

    senders = [threading.Thread(target=send, daemon=True) for _ in range(16)]
    for t in senders:
        t.start()
    time.sleep(4.0)
    stop.set()
    for t in senders:
        t.join(30)
    after = memory_mb(pid)
    assert codes and set(codes) == {grpc.StatusCode.UNAUTHENTICATED}, set(codes)
    # before: +1.0 to 1.5 GB (16 MiB inflated per call, before the token was looked at)
    assert after["VmHWM"] - before["VmHWM"] < 64, (before, after)


# --- item 1: slow heads and bodies ----------------------------------------------------------------------------
def test_a_head_sent_a_byte_at_a_time_and_a_body_never_sent_are_cut_off(prod: Deployment) -> None:
    control = prod.collector.control
    host, port = host_port(control)
    slow = context(prod).wrap_socket(socket.create_connection((host, port), timeout=10), server_hostname=host)
    stalled = open_head(prod, control, head("POST", "/v1/identity", 4000))
    text = b"POST /v1/identity HTTP/1.1\r\nHost: collector\r\n"
    started = time.monotonic()
    closed_at = None
    for i in range(40):  # a byte every half second: the head would take 24 s
        try:
            slow.sendall(text[i % len(text):i % len(text) + 1])
        except OSError:
            closed_at = time.monotonic() - started
            break
        time.sleep(0.5)
        slow.settimeout(0.01)
        try:
            if slow.recv(1) == b"":
                closed_at = time.monotonic() - started
                break
        except (TimeoutError, ssl.SSLWantReadError):
            pass
        except OSError:
            closed_at = time.monotonic() - started
            break
    slow.close()
    assert closed_at is not None and closed_at < 15, closed_at  # before: open as long as the sender kept it
    assert status_of(stalled, 1.0) == 408  # the body stopped coming: answered, connection closed
    stalled.close()


def test_refused_strangers_leave_no_traceback_in_the_log(prod: Deployment) -> None:
    """Runs after the attacks above: the collector logged causes, once each, never a traceback."""
    log = prod.collector.log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
    assert log.count("was closed") <= 4, log[-3000:]
