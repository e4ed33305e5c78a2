# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""One pass over an OTLP ExportTraceServiceRequest's protobuf bytes into ``otel_traces`` columns.

:func:`decode` fills exactly the lists :func:`agentreplay_collector.otlp.convert` fills from
protobuf objects (same values, same SpanRecords), plus each resource's agent id for the auth
check, reading the wire format directly instead of protobuf's Python objects. It handles the
inputs a recorder sends and nothing else: anything it is not sure of (a wire type it does not
expect, a singular field given twice, invalid UTF-8, an attribute value that is a key-value list,
bytes or empty, an id of the wrong length, a time past Arrow's range, a replayed run named by
something that is no run id) makes it answer None, and the caller converts the same bytes through
the pure path, whose refusals are then the only ones. Unknown fields are skipped, as protobuf does.
"""

from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.object cimport PyObject, PyObject_GenericSetAttr
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy

import dataclasses

from agentreplay_otel.core import EventRecord, SpanRecord, claims_chain, is_trace_id, kind_name, semconv, status_name


cdef extern from "Python.h":
    const char* PyUnicode_AsUTF8AndSize(object text, Py_ssize_t* size) except NULL

cdef str AGENT_ID = semconv.AGENT_ID
cdef str SERVICE_NAME = semconv.SERVICE_NAME
cdef str REPLAY_OF = semconv.REPLAY_OF
# OTLP's SpanKind counts from UNSPECIFIED=0; the SDK's (and kind_name's) from INTERNAL=0.
cdef tuple KINDS = ("Unspecified", *(kind_name(i) for i in range(5)))
cdef tuple STATUSES = tuple(status_name(i) for i in range(3))
cdef str TRUE = "true"
cdef str FALSE = "false"
cdef str EMPTY = ""
cdef uint64_t DAY_NS = 86_400 * 1_000_000_000
cdef uint64_t MAX_TIME = 0x7FFFFFFFFFFFFFFF  # Arrow's timestamp[ns] is an int64
cdef const char* HEX = b"0123456789abcdef"


class _Unsure(Exception):
    """Not an input this pass is sure to convert as the pure path does: let the pure path decide."""


cdef struct Cur:
    const unsigned char* p
    const unsigned char* end


# --- wire primitives ---------------------------------------------------------------------
cdef uint64_t _varint(Cur* c) except? 0xFFFFFFFFFFFFFFFF:
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef unsigned char byte
    while True:
        if c.p >= c.end:
            raise _Unsure()
        byte = c.p[0]
        c.p += 1
        if shift == 63 and byte > 1:
            raise _Unsure()
        result |= (<uint64_t>(byte & 0x7F)) << shift
        if byte < 0x80:
            return result
        shift += 7


cdef inline uint32_t _tag(Cur* c) except? 0xFFFFFFFF:
    cdef uint64_t tag
    if c.p < c.end and c.p[0] < 0x80:  # field numbers below 16: one byte
        tag = c.p[0]
        c.p += 1
    else:
        tag = _varint(c)
    if tag > 0xFFFFFFFF or (tag >> 3) == 0:
        raise _Unsure()
    return <uint32_t>tag


cdef inline int _sub(Cur* c, Cur* out) except -1:
    """A length-delimited field's bytes, as a cursor of their own."""
    cdef uint64_t n
    if c.p < c.end and c.p[0] < 0x80:
        n = c.p[0]
        c.p += 1
    else:
        n = _varint(c)
    if n > <uint64_t>(c.end - c.p):
        raise _Unsure()
    out.p = c.p
    out.end = c.p + n
    c.p += n
    return 0


cdef inline uint64_t _fixed64(Cur* c) except? 0xFFFFFFFFFFFFFFFF:
    cdef uint64_t v = 0
    cdef int i
    if c.end - c.p < 8:
        raise _Unsure()
    for i in range(8):
        v |= (<uint64_t>c.p[i]) << (8 * i)
    c.p += 8
    return v


cdef int _skip(Cur* c, uint32_t wire) except -1:
    cdef Cur ignored
    if wire == 0:
        _varint(c)
    elif wire == 1:
        if c.end - c.p < 8:
            raise _Unsure()
        c.p += 8
    elif wire == 2:
        _sub(c, &ignored)
    elif wire == 5:
        if c.end - c.p < 4:
            raise _Unsure()
        c.p += 4
    else:  # groups (3, 4) and the invalid 6, 7
        raise _Unsure()
    return 0


cdef inline str _text(Cur* c):
    """A string field's UTF-8 (strict: protobuf refuses what Python's decoder refuses)."""
    if c.p == c.end:
        return EMPTY
    return PyUnicode_DecodeUTF8(<const char*>c.p, c.end - c.p, NULL)


cdef inline int _expect(uint32_t tag, uint32_t wire) except -1:
    if (tag & 7) != wire:
        raise _Unsure()
    return 0


cdef str _hex(Cur* c):
    cdef char buf[32]
    cdef Py_ssize_t n = c.end - c.p
    cdef Py_ssize_t i
    for i in range(n):
        buf[2 * i] = HEX[c.p[i] >> 4]
        buf[2 * i + 1] = HEX[c.p[i] & 15]
    return PyUnicode_DecodeUTF8(buf, 2 * n, NULL)


# A record is built as its frozen dataclass __init__ builds it (every field set through object's
# setattr), without that __init__'s Python frame: a third of this pass's time otherwise. Only while
# the fields are the ones set here; any other SpanRecord is built through its constructor.
cdef tuple SPAN_FIELDS = (
    "trace_id", "span_id", "parent_span_id", "name", "kind", "start_ns", "end_ns", "status_code",
    "status_message", "attributes", "events", "resource",
)
cdef bint DIRECT_RECORDS = (
    tuple(f.name for f in dataclasses.fields(SpanRecord)) == SPAN_FIELDS
    and not hasattr(SpanRecord, "__post_init__")
    and tuple(getattr(SpanRecord, "__slots__", ())) == SPAN_FIELDS
)
cdef object _new_object = object.__new__


cdef object _span_record(
    str tid, str sid, str pid, str name, str kind, object start, object end, str code, str message,
    dict attrs, tuple events, dict resource,
):
    if not DIRECT_RECORDS:
        return SpanRecord(
            trace_id=tid, span_id=sid, parent_span_id=pid, name=name, kind=kind, start_ns=start, end_ns=end,
            status_code=code, status_message=message, attributes=attrs, events=events, resource=resource,
        )
    cdef object record = _new_object(SpanRecord)
    cdef tuple values = (tid, sid, pid, name, kind, start, end, code, message, attrs, events, resource)
    cdef Py_ssize_t i
    for i in range(12):
        PyObject_GenericSetAttr(record, SPAN_FIELDS[i], values[i])
    return record


cdef inline int _once(uint32_t tag, uint32_t wire, bint* seen) except -1:
    """A singular field: the wire type its schema gives, and only once (protobuf would merge or
    overwrite a second one; the pure path decides what that means)."""
    _expect(tag, wire)
    if seen[0]:
        raise _Unsure()
    seen[0] = True
    return 0


cdef inline str _cached_text(Cur* c, list cache, Py_ssize_t slot):
    """``_text``, reusing the string decoded at the same place of the previous span when the bytes are
    the same (attribute keys and most values repeat): equal UTF-8 bytes are an equal string."""
    cdef Py_ssize_t n = c.end - c.p
    cdef Py_ssize_t size
    cdef const char* data
    cdef str text
    if slot < PyList_GET_SIZE(cache):
        text = <str>PyList_GET_ITEM(cache, slot)
        data = PyUnicode_AsUTF8AndSize(text, &size)
        if size == n and memcmp(data, c.p, n) == 0:
            return text
        text = _text(c)
        cache[slot] = text
        return text
    text = _text(c)
    if slot == PyList_GET_SIZE(cache):
        cache.append(text)
    return text


# --- the decoder ---------------------------------------------------------------------------
cdef class _Decoder:
    cdef object array_string
    cdef bint value_is_string
    cdef list ts, dur, trace_ids, span_ids, parent_ids, trace_states, names, kinds, services
    cdef list scope_names, scope_versions, status_codes, status_msgs
    cdef list res_off, res_k, res_v, attr_off, attr_k, attr_v
    cdef list ev_off, ev_time, ev_name, ev_moff, ev_mk, ev_mv
    cdef list ln_off, ln_tid, ln_sid, ln_state, ln_moff, ln_mk, ln_mv
    cdef list records, resource_agents
    cdef list span_keys, span_values, event_keys, event_values, span_names
    cdef unsigned char last_trace[16]  # the previous span's trace id and its hex (a run's spans share it)
    cdef str last_tid
    cdef uint64_t last_day
    cdef set agents, days

    def __cinit__(self, array_string):
        self.array_string = array_string
        self.ts, self.dur, self.trace_ids, self.span_ids, self.parent_ids = [], [], [], [], []
        self.trace_states, self.names, self.kinds, self.services = [], [], [], []
        self.scope_names, self.scope_versions, self.status_codes, self.status_msgs = [], [], [], []
        self.res_off, self.res_k, self.res_v = [0], [], []
        self.attr_off, self.attr_k, self.attr_v = [0], [], []
        self.ev_off, self.ev_time, self.ev_name, self.ev_moff, self.ev_mk, self.ev_mv = [0], [], [], [0], [], []
        self.ln_off, self.ln_tid, self.ln_sid, self.ln_state = [0], [], [], []
        self.ln_moff, self.ln_mk, self.ln_mv = [0], [], []
        self.records, self.resource_agents = [], []
        self.agents, self.days = set(), set()
        self.span_keys, self.span_values, self.event_keys, self.event_values = [], [], [], []
        self.span_names = []
        self.last_tid = None
        self.last_day = 0xFFFFFFFFFFFFFFFF

    def result(self):
        columns = [
            self.ts, self.trace_ids, self.span_ids, self.parent_ids, self.trace_states, self.names, self.kinds,
            self.services, self.res_off, self.res_k, self.res_v, self.scope_names, self.scope_versions,
            self.attr_off, self.attr_k, self.attr_v, self.dur, self.status_codes, self.status_msgs,
            self.ev_off, self.ev_time, self.ev_name, self.ev_moff, self.ev_mk, self.ev_mv,
            self.ln_off, self.ln_tid, self.ln_sid, self.ln_state, self.ln_moff, self.ln_mk, self.ln_mv,
        ]
        return columns, self.records, self.agents, self.days, self.resource_agents

    # --- attribute values: the string the store keeps (stored_string of the value) --------
    cdef object _scalar(self, Cur* c, bint* is_float):
        """An array item: str, bool, int or float, as protobuf's Python objects give it."""
        cdef object out = None
        cdef int seen = 0
        cdef uint32_t tag, field
        cdef uint64_t bits
        cdef double d
        cdef Cur s
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 1:
                _expect(tag, 2)
                _sub(c, &s)
                out = _text(&s)
                is_float[0] = False
            elif field == 2:
                _expect(tag, 0)
                out = _varint(c) != 0
                is_float[0] = False
            elif field == 3:
                _expect(tag, 0)
                out = <int64_t>_varint(c)
                is_float[0] = False
            elif field == 4:
                _expect(tag, 1)
                bits = _fixed64(c)
                memcpy(&d, &bits, 8)
                out = d
                is_float[0] = True
            elif field <= 8:  # arrays, key-value lists, bytes, string indexes: the generic walk's
                raise _Unsure()
            else:
                _skip(c, tag & 7)
                continue
            seen += 1
        if seen != 1:
            raise _Unsure()
        return out

    cdef str _array(self, Cur* c):
        cdef list items = []
        cdef bint floats = False
        cdef bint is_float = False
        cdef uint32_t tag
        cdef Cur s
        while c.p < c.end:
            tag = _tag(c)
            if (tag >> 3) == 1:
                _expect(tag, 2)
                _sub(c, &s)
                items.append(self._scalar(&s, &is_float))
                floats = floats or is_float
            else:
                _skip(c, tag & 7)
        return self.array_string(items, floats)

    cdef str _stored(self, Cur* c, list cache, Py_ssize_t slot):
        cdef str out = None
        cdef int seen = 0
        cdef uint32_t tag, field
        cdef uint64_t bits
        cdef double d
        cdef Cur s
        self.value_is_string = False
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 1:
                _expect(tag, 2)
                _sub(c, &s)
                out = _cached_text(&s, cache, slot) if cache is not None else _text(&s)
                self.value_is_string = True
            elif field == 2:
                _expect(tag, 0)
                out = TRUE if _varint(c) != 0 else FALSE
                self.value_is_string = False
            elif field == 3:
                _expect(tag, 0)
                out = str(<int64_t>_varint(c))
                self.value_is_string = False
            elif field == 4:
                _expect(tag, 1)
                bits = _fixed64(c)
                memcpy(&d, &bits, 8)
                out = repr(d)
                self.value_is_string = False
            elif field == 5:
                _expect(tag, 2)
                _sub(c, &s)
                out = self._array(&s)
                self.value_is_string = False
            elif field <= 8:  # key-value lists, bytes, string indexes: the generic walk's
                raise _Unsure()
            else:
                _skip(c, tag & 7)
                continue
            seen += 1
        if seen != 1:  # empty (stored as "null"), or a oneof given twice (the last would win)
            raise _Unsure()
        return out

    cdef int _attribute(self, dict into, Cur* c, bint resource, list keys=None, list values=None) except -1:
        """One KeyValue into ``into`` (a later duplicate key replaces the value, as a dict does);
        ``keys`` and ``values``: the strings decoded at this place of the previous span, to reuse."""
        cdef Py_ssize_t slot = len(into)
        cdef str key = EMPTY
        cdef str value = None
        cdef bint have_key = False
        cdef bint value_is_string = False
        cdef uint32_t tag, field
        cdef Cur s
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 1:
                _once(tag, 2, &have_key)
                _sub(c, &s)
                key = _cached_text(&s, keys, slot) if keys is not None else _text(&s)
            elif field == 2:
                _expect(tag, 2)
                if value is not None:
                    raise _Unsure()
                _sub(c, &s)
                value = self._stored(&s, values, slot)
                value_is_string = self.value_is_string
            elif field == 3:  # key_strindex: not read
                _expect(tag, 0)
                _varint(c)
            else:
                _skip(c, tag & 7)
        if value is None:
            raise _Unsure()
        if resource and not value_is_string and key == AGENT_ID:
            raise _Unsure()  # the auth check reads the agent id's string_value alone
        into[key] = value
        return 0

    # --- messages ------------------------------------------------------------------------
    cdef dict _resource(self, Cur* c):
        cdef dict out = {}
        cdef uint32_t tag, field
        cdef Cur s
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 1:
                _expect(tag, 2)
                _sub(c, &s)
                self._attribute(out, &s, True)
            elif field == 2:
                _expect(tag, 0)
                _varint(c)
            elif field == 3:  # entity references: not what a recorder sends
                raise _Unsure()
            else:
                _skip(c, tag & 7)
        return out

    cdef tuple _scope(self, Cur* c):
        cdef str name = EMPTY
        cdef str version = EMPTY
        cdef bint have_name = False
        cdef bint have_version = False
        cdef dict ignored = {}
        cdef uint32_t tag, field
        cdef Cur s
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 1:
                _once(tag, 2, &have_name)
                _sub(c, &s)
                name = _text(&s)
            elif field == 2:
                _once(tag, 2, &have_version)
                _sub(c, &s)
                version = _text(&s)
            elif field == 3:  # scope attributes: not stored, but parsed (protobuf checks their UTF-8)
                _expect(tag, 2)
                _sub(c, &s)
                self._attribute(ignored, &s, False)
            elif field == 4:
                _expect(tag, 0)
                _varint(c)
            else:
                _skip(c, tag & 7)
        return name, version

    cdef int request(self, bytes body) except -1:
        cdef Cur c
        cdef Cur s
        cdef uint32_t tag
        c.p = <const unsigned char*>(<char*>body)
        c.end = c.p + len(body)
        while c.p < c.end:
            tag = _tag(&c)
            if (tag >> 3) == 1:
                _expect(tag, 2)
                _sub(&c, &s)
                self._resource_spans(&s)
            else:
                _skip(&c, tag & 7)
        return 0

    cdef int _resource_spans(self, Cur* c) except -1:
        cdef Cur start = c[0]
        cdef Cur s
        cdef Cur resource_bytes
        cdef bint have_resource = False
        cdef uint32_t tag, field
        cdef dict resource
        cdef Py_ssize_t spans = 0
        # first the resource (it may follow the scopes), then the scopes' spans
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 1:
                _once(tag, 2, &have_resource)  # protobuf would merge the two
                _sub(c, &resource_bytes)
            elif field == 2:
                _expect(tag, 2)
                _sub(c, &s)
            elif field == 3:
                _expect(tag, 2)
                _sub(c, &s)
                _text(&s)
            else:
                _skip(c, tag & 7)
        resource = self._resource(&resource_bytes) if have_resource else {}
        service = resource.get(SERVICE_NAME, EMPTY)
        agent = resource.get(AGENT_ID)
        if agent is not None:
            self.agents.add(agent)
        context = (resource, service, list(resource), list(resource.values()), agent is not None)
        c[0] = start
        while c.p < c.end:
            tag = _tag(c)
            if (tag >> 3) == 2:
                _sub(c, &s)
                spans += self._scope_spans(&s, context)
            else:
                _skip(c, tag & 7)
        if spans:
            self.resource_agents.append(agent)
        return 0

    cdef Py_ssize_t _scope_spans(self, Cur* c, tuple context) except -1:
        cdef Cur start = c[0]
        cdef Cur s
        cdef Cur scope_bytes
        cdef bint have_scope = False
        cdef uint32_t tag, field
        cdef Py_ssize_t spans = 0
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 1:
                _once(tag, 2, &have_scope)
                _sub(c, &scope_bytes)
            elif field == 2:
                _expect(tag, 2)
                _sub(c, &s)
            elif field == 3:
                _expect(tag, 2)
                _sub(c, &s)
                _text(&s)
            else:
                _skip(c, tag & 7)
        name, version = self._scope(&scope_bytes) if have_scope else (EMPTY, EMPTY)
        c[0] = start
        while c.p < c.end:
            tag = _tag(c)
            if (tag >> 3) == 2:
                _sub(c, &s)
                self._span(&s, context, name, version)
                spans += 1
            else:
                _skip(c, tag & 7)
        return spans

    cdef tuple _status(self, Cur* c):
        cdef str message = EMPTY
        cdef uint64_t code = 0
        cdef bint have_message = False
        cdef bint have_code = False
        cdef uint32_t tag, field
        cdef Cur s
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 2:
                _once(tag, 2, &have_message)
                _sub(c, &s)
                message = _text(&s)
            elif field == 3:
                _once(tag, 0, &have_code)
                code = _varint(c)
            else:
                _skip(c, tag & 7)
        if code > 0x7FFFFFFF:  # an int32 enum: negative or truncated values are the pure path's
            raise _Unsure()
        return STATUSES[code] if code < 3 else status_name(code), message

    cdef object _event(self, Cur* c):
        cdef dict attrs = {}
        cdef str name = EMPTY
        cdef uint64_t time = 0
        cdef bint have_name = False
        cdef bint have_time = False
        cdef uint32_t tag, field
        cdef Cur s
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 1:
                _once(tag, 1, &have_time)
                time = _fixed64(c)
            elif field == 2:
                _once(tag, 2, &have_name)
                _sub(c, &s)
                name = _cached_text(&s, self.span_names, 1)
            elif field == 3:
                _expect(tag, 2)
                _sub(c, &s)
                self._attribute(attrs, &s, False, self.event_keys, self.event_values)
            elif field == 4:
                _expect(tag, 0)
                _varint(c)
            else:
                _skip(c, tag & 7)
        if time > MAX_TIME:
            raise _Unsure()
        self.ev_mk.extend(attrs)
        self.ev_mv.extend(attrs.values())
        self.ev_moff.append(len(self.ev_mk))
        self.ev_time.append(time)
        self.ev_name.append(name)
        return EventRecord(name=name, time_ns=time, attributes=attrs)

    cdef int _link(self, Cur* c) except -1:
        cdef dict attrs = {}
        cdef str state = EMPTY
        cdef Cur trace_id
        cdef Cur span_id
        cdef bint have_trace = False
        cdef bint have_span = False
        cdef bint have_state = False
        cdef uint32_t tag, field
        cdef Cur s
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 1:
                _once(tag, 2, &have_trace)
                _sub(c, &trace_id)
            elif field == 2:
                _once(tag, 2, &have_span)
                _sub(c, &span_id)
            elif field == 3:
                _once(tag, 2, &have_state)
                _sub(c, &s)
                state = _text(&s)
            elif field == 4:
                _expect(tag, 2)
                _sub(c, &s)
                self._attribute(attrs, &s, False)
            elif field == 5:
                _expect(tag, 0)
                _varint(c)
            elif field == 6:
                _expect(tag, 5)
                _skip(c, 5)
            else:
                _skip(c, tag & 7)
        if not have_trace or not have_span or trace_id.end - trace_id.p != 16 or span_id.end - span_id.p != 8:
            raise _Unsure()
        self.ln_mk.extend(attrs)
        self.ln_mv.extend(attrs.values())
        self.ln_moff.append(len(self.ln_mk))
        self.ln_tid.append(_hex(&trace_id))
        self.ln_sid.append(_hex(&span_id))
        self.ln_state.append(state)
        return 0

    cdef int _span(self, Cur* c, tuple context, str scope_name, str scope_version) except -1:
        cdef Cur trace_id, span_id, parent, s
        cdef bint have_trace = False, have_span = False, have_parent = False
        cdef bint have_state = False, have_name = False, have_kind = False
        cdef bint have_start = False, have_end = False, have_status = False
        cdef str state = EMPTY
        cdef str name = EMPTY
        cdef uint64_t kind = 0, start = 0, end = 0
        cdef object status = None
        cdef dict attrs = {}
        cdef list events = None
        cdef Py_ssize_t links = 0
        cdef uint32_t tag, field
        cdef Py_ssize_t parent_len
        parent.p = parent.end = NULL
        while c.p < c.end:
            tag = _tag(c)
            field = tag >> 3
            if field == 9:  # attributes first: the most frequent field
                _expect(tag, 2)
                _sub(c, &s)
                self._attribute(attrs, &s, False, self.span_keys, self.span_values)
            elif field == 1:
                _once(tag, 2, &have_trace)
                _sub(c, &trace_id)
            elif field == 2:
                _once(tag, 2, &have_span)
                _sub(c, &span_id)
            elif field == 3:
                _once(tag, 2, &have_state)
                _sub(c, &s)
                state = _text(&s)
            elif field == 4:
                _once(tag, 2, &have_parent)
                _sub(c, &parent)
            elif field == 5:
                _once(tag, 2, &have_name)
                _sub(c, &s)
                name = _cached_text(&s, self.span_names, 0)
            elif field == 6:
                _once(tag, 0, &have_kind)
                kind = _varint(c)
            elif field == 7:
                _once(tag, 1, &have_start)
                start = _fixed64(c)
            elif field == 8:
                _once(tag, 1, &have_end)
                end = _fixed64(c)
            elif field == 11:
                _expect(tag, 2)
                _sub(c, &s)
                if events is None:
                    events = []
                events.append(self._event(&s))
            elif field == 13:
                _expect(tag, 2)
                _sub(c, &s)
                self._link(&s)
                links += 1
            elif field == 15:
                _once(tag, 2, &have_status)
                _sub(c, &s)
                status = self._status(&s)
            elif field == 10 or field == 12 or field == 14:
                _expect(tag, 0)
                _varint(c)
            elif field == 16:
                _expect(tag, 5)
                _skip(c, 5)
            else:
                _skip(c, tag & 7)
        parent_len = parent.end - parent.p
        if (
            not have_trace or not have_span or trace_id.end - trace_id.p != 16 or span_id.end - span_id.p != 8
            or (parent_len != 0 and parent_len != 8)
        ):
            raise _Unsure()  # the pure path refuses it, naming the span
        if kind > 0x7FFFFFFF or start > MAX_TIME:
            raise _Unsure()
        replayed = attrs.get(REPLAY_OF)
        if replayed is not None and not is_trace_id(replayed):
            raise _Unsure()  # the pure path refuses it, naming the span
        resource, service, rkeys, rvals, resource_claims = context
        if self.last_tid is not None and memcmp(self.last_trace, trace_id.p, 16) == 0:
            tid = self.last_tid
        else:
            tid = _hex(&trace_id)
            memcpy(self.last_trace, trace_id.p, 16)
            self.last_tid = tid
        sid = _hex(&span_id)
        pid = _hex(&parent) if parent_len else EMPTY
        kind_text = KINDS[kind] if kind < 6 else KINDS[0]
        if status is not None:
            code, message = status
        else:
            code, message = STATUSES[0], EMPTY
        start_ns = start
        end_ns = end

        self.ts.append(start_ns)
        if start // DAY_NS != self.last_day:
            self.last_day = start // DAY_NS
            self.days.add(self.last_day)
        self.dur.append(end - start)  # modulo 2**64, as the pure path masks it
        self.trace_ids.append(tid)
        self.span_ids.append(sid)
        self.parent_ids.append(pid)
        self.trace_states.append(state)
        self.names.append(name)
        self.kinds.append(kind_text)
        self.services.append(service)
        self.scope_names.append(scope_name)
        self.scope_versions.append(scope_version)
        self.status_codes.append(code)
        self.status_msgs.append(message)
        self.res_k.extend(rkeys)
        self.res_v.extend(rvals)
        self.res_off.append(len(self.res_k))
        self.attr_k.extend(attrs)
        self.attr_v.extend(attrs.values())
        self.attr_off.append(len(self.attr_k))
        self.ev_off.append(len(self.ev_time))
        self.ln_off.append(len(self.ln_tid))
        if resource_claims or claims_chain(attrs, resource):
            self.records.append(
                _span_record(
                    tid, sid, pid, name, kind_text, start_ns, end_ns, code, message, attrs,
                    tuple(events) if events is not None else (), resource,
                )
            )
        return 0


def decode(body, array_string):
    """The columns of ``otlp.convert``'s table (in the schema's order, maps and nested groups as
    offsets and flat lists), the records, agent ids, days, and each resource-with-spans' agent id;
    or None where the pure path must decide. ``array_string(items, floats)`` stores an array."""
    if type(body) is not bytes:
        return None
    decoder = _Decoder(array_string)
    try:
        decoder.request(body)
    except (_Unsure, UnicodeDecodeError):
        return None
    return decoder.result()
