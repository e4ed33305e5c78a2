"""The transport's reads of httpx and httpx2 headers (a response's kept headers, one header's value) give
what the packages' own ``items()`` and ``get`` give; a client's server attributes are read once per URL."""

from __future__ import annotations

from typing import Any

import httpx
import httpx2
import pytest

from agentreplay_otel.instrumentation._capture import DROPPED_HEADERS, header, kept_headers
from agentreplay_otel.instrumentation._wrap import _server_attributes, server_attributes

_HEADER_LISTS = [
    [],
    [("Content-Type", "application/json"), ("X-Request-ID", "req_1"), ("Content-Length", "12")],
    [("set-cookie", "a=1"), ("X-Dup", "one"), ("x-dup", "two"), ("X-DUP", "three"), ("Date", "today")],
    [("content-type", "text/event-stream"), ("content-type", "charset=utf-8"), ("Content-Encoding", "gzip")],
    [(b"X-Latin", "caf\u00e9".encode("latin-1")), (b"Content-Type", b"application/json")],
    [(b"X-Utf8", "\u6771\u4eac".encode()), (b"x-rate", b"10")],
]


@pytest.mark.parametrize("package", [httpx, httpx2], ids=["httpx", "httpx2"])
@pytest.mark.parametrize("items", _HEADER_LISTS)
def test_kept_headers_and_one_header_read_as_the_package_reads_them(package: Any, items: list[Any]) -> None:
    headers = package.Headers(items)
    assert kept_headers(headers) == {k.lower(): v for k, v in headers.items() if k.lower() not in DROPPED_HEADERS}
    for name in ("content-type", "content-encoding", "x-dup", "absent"):
        assert header(headers, name.encode()) == headers.get(name, "")


def test_headers_of_another_kind_are_read_through_their_mapping() -> None:
    plain = {"Content-Type": "application/json", "X-Request-Id": "r", "Connection": "close"}
    assert header(plain, b"Content-Type") == "application/json"
    assert kept_headers(_Mapping(plain)) == {"content-type": "application/json", "x-request-id": "r"}


class _Mapping(dict):  # type: ignore[type-arg]
    encoding = "ascii"


@pytest.mark.parametrize("url", ["http://model.invalid/v1", "https://api.example.com", "http://[::1]:8080/v1"])
def test_server_attributes_are_read_once_per_url_and_handed_out_as_copies(url: str) -> None:
    for base in (url, httpx2.URL(url), httpx.URL(url)):
        first = server_attributes(base)
        assert first == _server_attributes(base)
        first["changed"] = True  # the caller's own dict
        assert server_attributes(base) == _server_attributes(base)
