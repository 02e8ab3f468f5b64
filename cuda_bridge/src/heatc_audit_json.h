// The events of an audit report as JSON text, for heatc_runtime.reports.audit_text: the common event
// (a match whose captures are finite numbers, no conflict) written here from the arrays the
// Python side reads out of a scan's records, the others given already written, in record
// order. The text is what `json.dumps(event, ensure_ascii=False)` writes for the dict the
// general path builds, character for character (tests/test_audit_text.py compares the two
// writers, and both with the reference interpreter's reports): Python's float repr
// (PyOS_double_to_string 'r'), its string escapes, its decoding of bytes that are not UTF-8
// (U+FFFD, by PyUnicode_DecodeUTF8 "replace"). It exists because Python spends about a
// microsecond an event on this, as long as the scan of the text took.

#pragma once

#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

namespace heatc_json {

// a growing byte buffer (no exceptions in this build: a failed allocation is remembered)
struct Text {
  char* p = nullptr;
  size_t n = 0, cap = 0;
  bool failed = false;
  ~Text() { free(p); }
  bool room(size_t more) {
    if (n + more <= cap) return true;
    size_t want = cap ? cap : 1 << 16;
    while (want < n + more) want *= 2;
    char* q = (char*)realloc(p, want);
    if (!q) return !(failed = true);
    p = q, cap = want;
    return true;
  }
  void put(const char* s, size_t len) {
    if (room(len)) memcpy(p + n, s, len), n += len;
  }
  void put(char c) {
    if (room(1)) p[n++] = c;
  }
  void put_int(int64_t v) {
    char b[24];
    int at = 24;
    uint64_t u = v < 0 ? 0 - (uint64_t)v : (uint64_t)v;
    do b[--at] = (char)('0' + u % 10), u /= 10;
    while (u);
    if (v < 0) b[--at] = '-';
    put(b + at, (size_t)(24 - at));
  }
  // a float as json.dumps writes it: repr, or NaN / Infinity / -Infinity
  void put_float(double v) {
    if (isnan(v)) return put("NaN", 3);
    if (isinf(v)) return v > 0 ? put("Infinity", 8) : put("-Infinity", 9);
    // (a whole number below 1e16 — most values — is its digits and ".0" in repr, as Python's
    // 'r' format writes every float whose exponent is below 16)
    if (v == floor(v) && fabs(v) < 1e16 && !(v == 0 && signbit(v))) {
      put_int((int64_t)v);
      return put(".0", 2);
    }
    char* r = PyOS_double_to_string(v, 'r', 0, Py_DTSF_ADD_DOT_0, nullptr);
    if (!r) {
      failed = true;
      return;
    }
    put(r, strlen(r));
    PyMem_Free(r);
  }
  // UTF-8 as a JSON string, escaped as json's encoder escapes with ensure_ascii=False
  void put_escaped(const uint8_t* s, size_t len) {
    static const char hex[] = "0123456789abcdef";
    put('"');
    size_t run = 0;  // the start of the bytes not yet copied
    for (size_t i = 0; i < len; i++) {
      uint8_t c = s[i];
      if (c >= 0x20 && c != '"' && c != '\\') continue;
      put((const char*)s + run, i - run);
      run = i + 1;
      char e = c == '"' ? '"' : c == '\\' ? '\\' : c == '\n' ? 'n' : c == '\r' ? 'r' : c == '\t' ? 't' : c == '\b' ? 'b'
             : c == '\f' ? 'f' : 0;  // clang-format off
      if (e) {
        char two[2] = {'\\', e};
        put(two, 2);
      } else {
        char six[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        put(six, 6);
      }
    }
    put((const char*)s + run, len - run);
    put('"');
  }
  // the bytes of a span as the text json writes: decoded as UTF-8 with U+FFFD for what is not
  // (ASCII, most spans, as it is)
  void put_span(const uint8_t* s, size_t len) {
    bool ascii = true;
    for (size_t i = 0; i < len && ascii; i++) ascii = s[i] < 0x80;
    if (ascii) return put_escaped(s, len);
    PyObject* u = PyUnicode_DecodeUTF8((const char*)s, (Py_ssize_t)len, "replace");
    Py_ssize_t m = 0;
    const char* q = u ? PyUnicode_AsUTF8AndSize(u, &m) : nullptr;
    if (!q) {
      failed = true;
    } else {
      put_escaped((const uint8_t*)q, (size_t)m);
    }
    Py_XDECREF(u);
  }
};

// an argument that is a buffer of exactly n items of `T`
template <class T>
struct Array {
  Py_buffer b;
  bool ok = false;
  Array(PyObject* obj, uint64_t n, const char* what) {
    if (PyObject_GetBuffer(obj, &b, PyBUF_SIMPLE) < 0) return;
    ok = (uint64_t)b.len == n * sizeof(T);
    if (!ok) {
      PyErr_Format(PyExc_ValueError, "events_json: %s is %zd bytes, expected %llu", what, b.len,
                   (unsigned long long)(n * sizeof(T)));
      PyBuffer_Release(&b);
    }
  }
  ~Array() {
    if (ok) PyBuffer_Release(&b);
  }
  const T& operator[](uint64_t i) const { return ((const T*)b.buf)[i]; }
};

// events_json(text, n, fast, start, end, char_start, char_end, key, rule, captures, n_captures,
//             failed, prefixes, capture_keys, failed_texts, general) -> bytes
// For each of the n records, in order: where fast[i] (u8), the event written from start/end
// (bytes), char_start/char_end, prefixes[key[i]] (the text up to the byte span: kind, rule,
// verdict), the captures capture_keys[rule[i]] names — (key text, index into the record's
// n_captures values) pairs — and failed_texts[failed[i]] (failed[i] >= 0); else the next of
// `general` (bytes, already written). The arrays are int64 (captures float64, n × n_captures);
// every index and span is checked. The events are joined with ", ".
PyObject* events_json(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 16) {
    PyErr_SetString(PyExc_TypeError,
                    "events_json(text, n, fast, start, end, char_start, char_end, key, rule, captures, n_captures, "
                    "failed, prefixes, capture_keys, failed_texts, general)");
    return nullptr;
  }
  uint64_t n = PyLong_AsUnsignedLongLong(args[1]), n_caps = PyLong_AsUnsignedLongLong(args[10]);
  if (PyErr_Occurred()) return nullptr;
  Py_buffer text;
  if (PyObject_GetBuffer(args[0], &text, PyBUF_SIMPLE) < 0) return nullptr;
  Array<uint8_t> fast(args[2], n, "fast");
  Array<int64_t> start(args[3], n, "start"), end(args[4], n, "end"), cstart(args[5], n, "char_start"),
      cend(args[6], n, "char_end"), key(args[7], n, "key"), rule(args[8], n, "rule"), failed(args[11], n, "failed");
  Array<double> caps(args[9], n * n_caps, "captures");
  PyObject* prefixes = args[12];
  PyObject* capture_keys = args[13];
  PyObject* failed_texts = args[14];
  PyObject* general = args[15];
  PyObject* out = nullptr;
  if (!fast.ok || !start.ok || !end.ok || !cstart.ok || !cend.ok || !key.ok || !rule.ok || !failed.ok || !caps.ok ||
      !PyTuple_Check(prefixes) || !PyTuple_Check(capture_keys) || !PyTuple_Check(failed_texts) ||
      !PyList_Check(general)) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "events_json: tuples of bytes and a list expected");
    PyBuffer_Release(&text);
    return nullptr;
  }
  const uint8_t* data = (const uint8_t*)text.buf;
  const uint64_t size = (uint64_t)text.len;
  Text o;
  Py_ssize_t g = 0;
  const char* bad = nullptr;
  for (uint64_t i = 0; i < n && !bad && !o.failed; i++) {
    if (i) o.put(", ", 2);
    if (!fast[i]) {
      PyObject* item = g < PyList_GET_SIZE(general) ? PyList_GET_ITEM(general, g++) : nullptr;
      if (!item || !PyBytes_Check(item)) {
        bad = "general: fewer written events than records the fast path leaves";
        break;
      }
      o.put(PyBytes_AS_STRING(item), (size_t)PyBytes_GET_SIZE(item));
      continue;
    }
    int64_t s = start[i], e = end[i], k = key[i], r = rule[i], f = failed[i];
    if (s < 0 || e < s || (uint64_t)e > size) {
      bad = "a span outside the text";
      break;
    }
    if (k < 0 || k >= PyTuple_GET_SIZE(prefixes) || r < 0 || r >= PyTuple_GET_SIZE(capture_keys) ||
        f < -1 || f >= PyTuple_GET_SIZE(failed_texts)) {
      bad = "an index outside its table";
      break;
    }
    PyObject* prefix = PyTuple_GET_ITEM(prefixes, k);
    PyObject* names = PyTuple_GET_ITEM(capture_keys, r);
    if (!PyBytes_Check(prefix) || !PyTuple_Check(names)) {
      bad = "prefixes are bytes, capture keys tuples";
      break;
    }
    o.put(PyBytes_AS_STRING(prefix), (size_t)PyBytes_GET_SIZE(prefix));
    o.put_int(s);
    o.put(", ", 2);
    o.put_int(e);
    o.put("], \"chars\": [", 13);
    o.put_int(cstart[i]);
    o.put(", ", 2);
    o.put_int(cend[i]);
    o.put("], \"text\": ", 11);
    o.put_span(data + s, (size_t)(e - s));
    o.put(", \"captures\": {", 15);
    for (Py_ssize_t c = 0; c < PyTuple_GET_SIZE(names); c++) {
      PyObject* pair = PyTuple_GET_ITEM(names, c);
      PyObject* name = PyTuple_Check(pair) && PyTuple_GET_SIZE(pair) == 2 ? PyTuple_GET_ITEM(pair, 0) : nullptr;
      long at = name ? PyLong_AsLong(PyTuple_GET_ITEM(pair, 1)) : -1;
      if (!name || !PyBytes_Check(name) || at < 0 || (uint64_t)at >= n_caps) {
        PyErr_Clear();
        bad = "a capture key is (bytes, index of a capture)";
        break;
      }
      if (c) o.put(", ", 2);
      o.put(PyBytes_AS_STRING(name), (size_t)PyBytes_GET_SIZE(name));
      o.put(": ", 2);
      o.put_float(caps[i * n_caps + (uint64_t)at]);
    }
    o.put('}');
    if (f >= 0) {
      PyObject* why = PyTuple_GET_ITEM(failed_texts, f);
      if (!PyBytes_Check(why)) {
        bad = "failed texts are bytes";
        break;
      }
      o.put(PyBytes_AS_STRING(why), (size_t)PyBytes_GET_SIZE(why));
    }
    o.put('}');
  }
  if (!bad && !o.failed && g != PyList_GET_SIZE(general)) bad = "general: more written events than records left";
  if (bad) {
    PyErr_Format(PyExc_ValueError, "events_json: %s", bad);
  } else if (o.failed) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
  } else {
    out = PyBytes_FromStringAndSize(o.p ? o.p : "", (Py_ssize_t)o.n);
  }
  PyBuffer_Release(&text);
  return out;
}

}  // namespace heatc_json
