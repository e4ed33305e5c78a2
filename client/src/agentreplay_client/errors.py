"""The collector's errors, in one place, and the OTLP status each one answers with.

    CollectorError
     +-- ConfigError            the config file is wrong; start-up stops, naming the key
     +-- RequestError           an export the collector refuses (the sender must not retry as is)
     |    +-- MalformedRequest      gRPC INVALID_ARGUMENT, HTTP 400
     |    +-- ExportRejected        gRPC INVALID_ARGUMENT, HTTP 400: well-formed, but refused as is
     |    +-- UnsupportedMediaType  HTTP 415
     |    +-- RequestTooLarge       gRPC RESOURCE_EXHAUSTED (no RetryInfo), HTTP 413
     |    +-- Unauthenticated       gRPC UNAUTHENTICATED, HTTP 401
     |    +-- PermissionDenied      gRPC PERMISSION_DENIED, HTTP 403
     +-- StoreError             ClickHouse/chDB could not be reached or refused a statement
          +-- StoreUnavailable      gRPC UNAVAILABLE, HTTP 503 + Retry-After: the sender retries
          +-- StoreRejected         the store refused these rows (not the store's state): the export
                                    that holds them is answered ExportRejected, the others go on

Foreign errors (clickhouse-connect, chDB, protobuf, PyJWT) are mapped to these at the
boundary of the module that calls the foreign library; nothing else catches them.
"""

from __future__ import annotations


class CollectorError(Exception):
    """Base of every collector error."""


class ConfigError(CollectorError):
    """A config value that is missing, unknown or of the wrong kind.

    ``path`` is the dotted key (``exporters.clickhouse.endpoint``); ``expected`` says
    what would have been accepted.
    """

    def __init__(self, path: str, expected: str, got: object = None) -> None:
        self.path = path
        self.expected = expected
        self.got = got
        shown = "" if got is None else f" (got {got!r})"
        super().__init__(f"{path or '<root>'}: expected {expected}{shown}")


class RequestError(CollectorError):
    """An export request the collector refuses; retrying it unchanged will not help."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class MalformedRequest(RequestError):
    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class ExportRejected(RequestError):
    """A well-formed export refused for what it holds (e.g. spans on too many days to store at once);
    only this export is refused, the ones around it go on."""

    http_status = 400
    grpc_code = "INVALID_ARGUMENT"


class UnsupportedMediaType(RequestError):
    http_status = 415
    grpc_code = "INVALID_ARGUMENT"


class RequestTooLarge(RequestError):
    http_status = 413
    grpc_code = "RESOURCE_EXHAUSTED"


class Unauthenticated(RequestError):
    http_status = 401
    grpc_code = "UNAUTHENTICATED"


class PermissionDenied(RequestError):
    http_status = 403
    grpc_code = "PERMISSION_DENIED"


class StoreError(CollectorError):
    """The store refused or failed a statement."""


class StoreRejected(StoreError):
    """The store refused the rows themselves (e.g. too many partitions in one insert): retrying the
    same rows will not help, and the store is not down."""


class StoreUnavailable(StoreError):
    """The store cannot take writes now; the export is not acknowledged and should be retried."""

    http_status = 503
    grpc_code = "UNAVAILABLE"

    def __init__(self, message: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
