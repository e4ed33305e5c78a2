# cython: language_level=3, boundscheck=False, wraparound=False
"""A span's chain link hash written in C: hashed by the recorder as each span is exported, and again
by the collector's verifier for each span of each run.

``link_hash(prev, record)`` is :func:`agentreplay_otel.chainverify.link_hash`: SHA-256 of the previous
hash's bytes and the span's RFC 8785 form without its chain attributes. It writes that form itself,
straight from the record's strings, where it can be sure of the bytes: every attribute key ASCII (so
code-point order is JCS's UTF-16 order), every value a string, every time an integer within int64.
Anything else (a lone surrogate, a key beyond ASCII) is hashed by the pure function, so the digest
never depends on this module (tests/test_linkhash.py holds the two to the same bytes).

``link_span(prev, fields, attributes, events)`` is the same digest of a span the recorder has not
reduced to a record: its attributes as the SDK holds them, each value not a string written as the
store keeps it (:func:`agentreplay_otel.canonical.stored_string`), so no record is built for it.
Optional: the SDK installs without a C compiler and then hashes with the pure function.
"""

from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.dict cimport PyDict_GetItem
from cpython.object cimport PyObject
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcpy, strlen

cdef extern from "Python.h":
    bint PyUnicode_IS_ASCII(object text)  # not in Cython's cpython.unicode

import hashlib

from agentreplay_otel import semconv
from agentreplay_otel.canonical import stored_string as _stored_string
from agentreplay_otel.chainverify import link_hash as _pure_link_hash

_CHAIN = frozenset(semconv.CHAIN_ATTRIBUTES)
_sha256 = hashlib.sha256
_fromhex = bytes.fromhex

cdef struct Buf:
    char* data
    Py_ssize_t size
    Py_ssize_t cap

cdef const char* _HEX = b"0123456789abcdef"


cdef int _grow(Buf* b, Py_ssize_t extra) except -1:
    cdef Py_ssize_t cap = b.cap
    cdef char* data
    if b.size + extra <= cap:
        return 0
    while cap < b.size + extra:
        cap *= 2
    data = <char*>realloc(b.data, cap)
    if data == NULL:
        raise MemoryError()
    b.data = data
    b.cap = cap
    return 0


cdef int _raw(Buf* b, const char* text) except -1:
    """JSON punctuation and keys, as they stand."""
    cdef Py_ssize_t n = strlen(text)
    _grow(b, n)
    memcpy(b.data + b.size, text, n)
    b.size += n
    return 0


cdef unsigned char _PLAIN[256]  # 1: a byte written as it is (not '"', not '\\', no control)
for _c in range(256):
    _PLAIN[_c] = 1 if _c >= 0x20 and _c != 34 and _c != 92 else 0


cdef inline bint _plain8(const unsigned char* p) noexcept nogil:
    """Whether none of the 8 bytes at ``p`` needs escaping (no control, '"' or '\\'), by the word's bits:
    a byte below 0x20, or one equal to 0x22 or 0x5c, sets its top bit in the test below (exact for the
    word as a whole), so a plain stretch is checked 8 bytes at a time."""
    cdef unsigned long long x, quote, slash
    memcpy(&x, p, 8)
    quote = x ^ 0x2222222222222222ULL
    slash = x ^ 0x5c5c5c5c5c5c5c5cULL
    return ((((x - 0x2020202020202020ULL) & ~x) | ((quote - 0x0101010101010101ULL) & ~quote)
             | ((slash - 0x0101010101010101ULL) & ~slash)) & 0x8080808080808080ULL) == 0


cdef int _string(Buf* b, str value) except -1:
    """A JSON string as JCS writes it: UTF-8 as is, '"' and '\\' escaped, controls as \\b \\t \\n \\f \\r
    or \\u00xx. Raises UnicodeEncodeError on a lone surrogate (the caller then takes the pure path)."""
    cdef Py_ssize_t n, i = 0, run
    cdef const unsigned char* s = <const unsigned char*>PyUnicode_AsUTF8AndSize(value, &n)
    cdef unsigned char c
    cdef char* out
    _grow(b, 6 * n + 2)  # the worst case: every byte a \u00xx
    out = b.data + b.size
    out[0] = 34  # "
    out += 1
    while i < n:
        run = i
        while run + 8 <= n and _plain8(s + run):
            run += 8
        while run < n and _PLAIN[s[run]]:
            run += 1
        if run > i:  # most strings are one such stretch: copied whole
            memcpy(out, s + i, run - i)
            out += run - i
            i = run
            if i == n:
                break
        c = s[i]
        i += 1
        out[0] = 92
        if c == 34 or c == 92:
            out[1] = <char>c
        elif c == 8:
            out[1] = 98  # \b
        elif c == 9:
            out[1] = 116  # \t
        elif c == 10:
            out[1] = 110  # \n
        elif c == 12:
            out[1] = 102  # \f
        elif c == 13:
            out[1] = 114  # \r
        else:
            out[1] = 117; out[2] = 48; out[3] = 48  # \u00
            out[4] = _HEX[c >> 4]
            out[5] = _HEX[c & 15]
            out += 4
        out += 2
    out[0] = 34
    out += 1
    b.size = out - b.data
    return 0


cdef int _decimal(Buf* b, object value) except -1:
    """A time (an int from 0 to 2**63 - 1) as the string of its digits, as JCS writes the span's times;
    anything else raises, and the caller takes the pure path."""
    if type(value) is not int:
        raise TypeError("not an int")
    cdef long long v = value  # OverflowError past int64
    if v < 0:
        raise OverflowError("a negative time")
    cdef char digits[24]
    cdef int n = 0
    cdef unsigned long long u = <unsigned long long>v
    if u == 0:
        digits[0] = 48
        n = 1
    while u:
        digits[n] = <char>(48 + u % 10)
        u //= 10
        n += 1
    _grow(b, n + 2)
    b.data[b.size] = 34
    b.size += 1
    while n:
        n -= 1
        b.data[b.size] = digits[n]
        b.size += 1
    b.data[b.size] = 34
    b.size += 1
    return 0


cdef int _object(Buf* b, object attributes, bint drop_chain, bint mixed) except -1:
    """A mapping of ASCII keys with its keys sorted; 1 when it is not one this module writes. Its values
    are strings, or with ``mixed`` anything, each value not a string written as the store keeps it (an
    int its digits, anything else :func:`~agentreplay_otel.canonical.stored_string`'s text)."""
    cdef list keys = []
    cdef dict mapping
    cdef frozenset chain = _CHAIN
    cdef PyObject* found
    cdef object value
    cdef bint first = True
    if type(attributes) is not dict:
        if not mixed:
            return 1
        attributes = {} if attributes is None else dict(attributes)
    mapping = <dict>attributes
    for key in mapping:
        if type(key) is not str or not PyUnicode_IS_ASCII(key):
            return 1
        if drop_chain and key in chain:
            continue
        keys.append(key)
    keys.sort()
    _raw(b, b"{")
    for key in keys:
        found = PyDict_GetItem(mapping, key)
        if found == NULL:
            return 1
        value = <object>found
        if type(value) is not str:
            if not mixed:
                return 1
            value = str(value) if type(value) is int else _stored_string(value)
            if not isinstance(value, str):
                return 1
        if not first:
            _raw(b, b",")
        first = False
        _string(b, <str>key)
        _raw(b, b":")
        _string(b, <str>value)
    _raw(b, b"}")
    return 0


cdef int _member(Buf* b, const char* before, str value) except -1:
    """``before`` (the punctuation and the key, as they stand) and the value as a JSON string."""
    _raw(b, before)
    _string(b, value)
    return 0


cdef int _time_member(Buf* b, const char* before, object value) except -1:
    _raw(b, before)
    _decimal(b, value)
    return 0


cdef int _event(Buf* b, object name, object time_ns, object attributes, bint mixed) except -1:
    _raw(b, b'{"attributes":')
    if _object(b, attributes, False, mixed):
        return 1
    _member(b, b',"name":', name)
    _time_member(b, b',"time":', time_ns)
    _raw(b, b"}")
    return 0


cdef int _span(Buf* b, tuple fields, object attributes, object events, bint mixed) except -1:
    """The span's canonical form (keys in JCS order, written out); 1 when the pure path must write it.
    ``fields``: trace id, span id, parent span id, name, kind, start, end, status code and message;
    ``events``: (name, time, attributes) each."""
    cdef bint first = True
    if len(fields) != 9:
        return 1
    trace_id, span_id, parent_span_id, name, kind, start_ns, end_ns, status_code, status_message = fields
    _raw(b, b'{"attributes":')
    if _object(b, attributes, True, mixed):
        return 1
    _time_member(b, b',"end":', end_ns)
    _raw(b, b',"events":[')
    for event_name, event_time, event_attributes in events:
        if not first:
            _raw(b, b",")
        first = False
        if _event(b, event_name, event_time, event_attributes, mixed):
            return 1
    _member(b, b'],"kind":', kind)
    _member(b, b',"name":', name)
    _member(b, b',"parent_span_id":', parent_span_id)
    _member(b, b',"span_id":', span_id)
    _time_member(b, b',"start":', start_ns)
    _member(b, b',"status":{"code":', status_code)
    _member(b, b',"message":', status_message)
    _member(b, b'},"trace_id":', trace_id)
    _raw(b, b"}")
    return 0


cdef object _written(tuple fields, object attributes, object events, bint mixed):
    """The canonical bytes, or None where the pure path must write them."""
    cdef Buf b
    b.data = <char*>malloc(8192)
    if b.data == NULL:
        raise MemoryError()
    b.size = 0
    b.cap = 8192
    try:
        try:
            if _span(&b, fields, attributes, events, mixed):
                return None
        except (UnicodeEncodeError, OverflowError, TypeError, ValueError):
            return None
        return PyBytes_FromStringAndSize(b.data, b.size)
    finally:
        free(b.data)


cdef str _digest(str prev_hash, bytes body):
    hashed = _sha256(_fromhex(prev_hash))
    hashed.update(body)
    return hashed.hexdigest()


def canonical(record):
    """The span's RFC 8785 bytes without its chain attributes, or None where the pure path must write them."""
    fields = (record.trace_id, record.span_id, record.parent_span_id, record.name, record.kind, record.start_ns,
              record.end_ns, record.status_code, record.status_message)
    events = [(e.name, e.time_ns, e.attributes) for e in record.events]
    return _written(fields, record.attributes, events, False)


def link_hash(str prev_hash, record):
    """:func:`agentreplay_otel.chainverify.link_hash`, the same hex digest, written here where it can be."""
    body = canonical(record)
    if body is None:
        return _pure_link_hash(prev_hash, record)
    return _digest(prev_hash, body)


def link_span(str prev_hash, tuple fields, dict attributes, events):
    """The link hash of the record these would make (``fields`` in :class:`SpanRecord`'s order, up to
    its status message; each event a (name, time, attributes)), each value not a string taken as the
    store keeps it; None where the pure path must hash the record."""
    body = _written(fields, attributes, events, True)
    return None if body is None else _digest(prev_hash, body)
