# cython: language_level=3, boundscheck=False, wraparound=False
"""Recorded content's two hot loops in C, each the pure function's answer (tests/test_content_compiled.py).

``alike(value, min_chars, strings)`` is :func:`agentreplay_otel.content._alike`, on the agent's thread
for each view of each LLM call: whether ``value`` holds only what orjson writes byte for byte as
``json`` does (dicts with string keys, lists, tuples, strings, integers, booleans, None: exact types),
collecting its strings of ``min_chars`` or more into ``strings`` (unless None) in the order its JSON
holds them. Nested past 200 levels it raises RecursionError, as the pure one does past the
interpreter's limit, and its callers take their unbounded paths.

``replaced(body, literals)`` is :func:`agentreplay_otel.store_once._replaced`, on the export thread for
each body: each literal replaced in turn, every occurrence left to right, by its reference. It works
on the UTF-8 bytes (a match of one whole UTF-8 text in another starts and ends on characters, so the
places are ``str.find``'s); a text with a lone surrogate has none, and is left to the pure function.

Optional: without a C compiler the SDK takes the pure functions.
"""

from cpython.unicode cimport PyUnicode_AsUTF8AndSize, PyUnicode_DecodeUTF8
from libc.stdlib cimport free, malloc
from libc.string cimport memcmp, memcpy

cdef extern from "string.h":
    void* memmem(const void* haystack, size_t haystacklen, const void* needle, size_t needlelen) nogil

cdef int _MAX_DEPTH = 200
cdef Py_ssize_t _HEAD = 16  # a literal's first bytes, looked for before the whole


cdef inline bint _leaf(object kind):
    return kind is str or kind is int or kind is bool or kind is type(None)


cdef int _walk(object value, Py_ssize_t min_chars, list strings, int depth) except -1:
    """1 when ``value`` is alike, 0 when not."""
    cdef object kind = type(value)
    cdef object items
    if kind is dict:
        for key in <dict>value:
            if type(key) is not str:
                return 0
        items = (<dict>value).values()
    elif kind is list or kind is tuple:
        items = value
    else:
        if strings is not None and kind is str and len(<str>value) >= min_chars:
            strings.append(value)
        return _leaf(kind)
    if depth >= _MAX_DEPTH:
        raise RecursionError("content nested past the compiled walk's depth")
    for item in items:
        kind = type(item)
        if kind is str:
            if strings is not None and len(<str>item) >= min_chars:
                strings.append(item)
        elif not _leaf(kind) and not _walk(item, min_chars, strings, depth + 1):
            return 0
    return 1


def alike(value, Py_ssize_t min_chars, list strings):
    """:func:`agentreplay_otel.content._alike`, in C."""
    return _walk(value, min_chars, strings, 0) == 1


cdef Py_ssize_t _find(const char* text, Py_ssize_t size, const char* literal, Py_ssize_t n, Py_ssize_t start) nogil:
    """The first place of ``literal`` in ``text`` from ``start``, or -1: its first bytes found with
    ``memmem``, each place checked whole."""
    cdef Py_ssize_t head = n if n < _HEAD else _HEAD
    cdef const char* at
    while start + n <= size:
        at = <const char*>memmem(text + start, size - start, literal, head)
        if at == NULL:
            return -1
        start = at - text
        if start + n > size:
            return -1
        if memcmp(at + head, literal + head, n - head) == 0:
            return start
        start += 1
    return -1


def replaced(str body, list literals, tuple refs):
    """``store_once._replaced(body, literals)``: (the body with each literal replaced by the reference at
    its index in ``refs``, the replacements made), or None where the pure function must do it (a lone
    surrogate, more literals than ``refs``)."""
    cdef Py_ssize_t size, n, ref_size, at, start, out_size, made = 0, total = 0
    cdef const char* text
    cdef const char* literal
    cdef const char* ref
    cdef char* current = NULL
    cdef char* out = NULL
    cdef list places
    cdef Py_ssize_t index
    if len(literals) > len(refs):
        return None
    try:
        text = PyUnicode_AsUTF8AndSize(body, &size)
        current = <char*>malloc(size + 1)
        if current == NULL:
            raise MemoryError()
        memcpy(current, text, size)
        for index in range(len(literals)):
            literal = PyUnicode_AsUTF8AndSize(<str>literals[index], &n)
            if n == 0:
                return None
            at = _find(current, size, literal, n, 0)
            if at < 0:
                continue
            places = []
            while at >= 0:
                places.append(at)
                at = _find(current, size, literal, n, at + n)
            ref = PyUnicode_AsUTF8AndSize(<str>refs[index], &ref_size)
            out_size = size + len(places) * (ref_size - n)
            out = <char*>malloc(out_size + 1)
            if out == NULL:
                raise MemoryError()
            start = 0
            total = 0
            for place in places:
                at = place
                memcpy(out + total, current + start, at - start)
                total += at - start
                memcpy(out + total, ref, ref_size)
                total += ref_size
                start = at + n
            memcpy(out + total, current + start, size - start)
            free(current)
            current, out = out, NULL
            size = out_size
            made += len(places)
        return PyUnicode_DecodeUTF8(current, size, NULL), made
    except UnicodeEncodeError:
        return None
    finally:
        free(current)
        free(out)
