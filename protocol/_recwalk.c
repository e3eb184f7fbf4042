/* The record walk of record_validation._walk in C: same arguments, results and messages (the Python version is
 * the reference and the fallback when this module is not built). Measured by bench/validate_bench.py. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#define E_STRUCTURE (-1)

/* Zigzag varint of at most `maxbytes` bytes at p[*pos] (bounded by n), value at most `limit` before zigzag.
 * Returns 0, or E_STRUCTURE when truncated, too long or out of range. */
static int rd(const unsigned char *p, Py_ssize_t n, Py_ssize_t *pos, int maxbytes, uint64_t limit, int64_t *out) {
    uint64_t v = 0;
    Py_ssize_t i = *pos;
    for (int k = 0; k < maxbytes; k++) {
        if (i < 0 || i >= n)
            return E_STRUCTURE;
        unsigned char b = p[i++];
        v |= (uint64_t)(b & 0x7F) << (7 * k);
        if (!(b & 0x80)) {
            if (v > limit || (k == 9 && b > 1))
                return E_STRUCTURE;
            *pos = i;
            *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
            return 0;
        }
    }
    return E_STRUCTURE;
}

#define VARINT(var)                                                           \
    do {                                                                      \
        if (rd(p, n, &j, 5, 0xFFFFFFFFULL, &(var)) < 0) goto structure;       \
    } while (0)

static PyObject *result(Py_ssize_t i, long long idx, int64_t lo, int64_t hi, PyObject *err) {
    return Py_BuildValue("(nLLLO)", i, idx, (long long)lo, (long long)hi, err);
}

static PyObject *fail(Py_ssize_t i, long long idx, int64_t lo, int64_t hi, const char *fmt, ...) {
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    PyObject *s = PyUnicode_FromString(msg);
    if (s == NULL)
        return NULL;
    PyObject *r = result(i, idx, lo, hi, s);
    Py_DECREF(s);
    return r;
}

/* walk(buf, i, n, idx, count, lo, hi, keyless, partial) -> (i, idx, lo, hi, error message or None) */
static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t i, n;
    long long idx, count, lo_in, hi_in;
    PyObject *keyless;
    int partial;
    if (!PyArg_ParseTuple(args, "y*nnLLLLOp", &view, &i, &n, &idx, &count, &lo_in, &hi_in, &keyless, &partial))
        return NULL;
    const unsigned char *p = view.buf;
    if (n > view.len)
        n = view.len;
    int64_t lo = lo_in, hi = hi_in;
    PyObject *out = NULL;
    Py_ssize_t j = 0;
    Py_ssize_t safe = partial ? n - 5 : n - 1;
    for (; idx < count; idx++) {
        if (i > safe) { /* the length varint may be cut: more is coming, or the section ends early */
            int cut = 1;
            for (Py_ssize_t k = i; k < n; k++)
                if (!(p[k] & 0x80)) cut = 0;
            if (cut) {
                if (partial) { out = result(i, idx, lo, hi, Py_None); goto done; }
                out = fail(i, idx, lo, hi, "Incorrect declared batch size, premature EOF reached");
                goto done;
            }
        }
        Py_ssize_t start = i;
        int64_t length, d, od, kl, vl, hc, hk, hv;
        j = i;
        VARINT(length);
        i = j;
        Py_ssize_t end = i + length;
        if (end > n) {
            if (partial) { out = result(start, idx, lo, hi, Py_None); goto done; }
            out = fail(i, idx, lo, hi, "Incorrect declared batch size, premature EOF reached");
            goto done;
        }
        if (length < 6) {
            out = fail(i, idx, lo, hi, "Invalid record size %lld", (long long)length);
            goto done;
        }
        j = i + 1; /* attributes, unused */
        if (rd(p, n, &j, 10, UINT64_MAX, &d) < 0) goto structure;
        if (d < lo) lo = d;
        if (d > hi) hi = d;
        VARINT(od);
        if (od != idx) {
            out = fail(i, idx, lo, hi, "Record %lld of the batch has offset delta %lld: inner offsets must be 0..n-1",
                       idx, (long long)od);
            goto done;
        }
        VARINT(kl);
        if (kl >= 0)
            j += kl;
        else if (keyless != Py_None) {
            PyObject *ix = PyLong_FromLongLong(idx);
            if (ix == NULL || PyList_Append(keyless, ix) < 0) { Py_XDECREF(ix); goto done; }
            Py_DECREF(ix);
        }
        VARINT(vl);
        if (vl > 0)
            j += vl;
        VARINT(hc);
        if (hc != 0 && (hc < 0 || hc > end - j)) { /* as the Python walk: 0 is not checked */
            out = fail(i, idx, lo, hi, "Found invalid number of record headers %lld", (long long)hc);
            goto done;
        }
        for (int64_t h = 0; h < hc; h++) {
            VARINT(hk);
            if (hk < 0) {
                out = fail(i, idx, lo, hi, "Invalid negative header key size %lld", (long long)hk);
                goto done;
            }
            j += hk;
            VARINT(hv);
            if (hv > 0)
                j += hv;
        }
        if (j != end) {
            out = fail(i, idx, lo, hi,
                       "Invalid record size: expected to read %lld bytes in record payload, but instead read %lld",
                       (long long)length, (long long)(j - end + length));
            goto done;
        }
        i = end;
    }
    out = result(i, idx, lo, hi, Py_None);
    goto done;
structure:
    out = fail(i, idx, lo, hi, "Found invalid record structure");
done:
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "Walk whole records (see record_validation._walk)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_recwalk", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recwalk(void) { return PyModule_Create(&module); }
