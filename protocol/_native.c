/* The Produce request walk of protocol/apis/produce.py, in C: the byte path only.
 *
 * walk_produce(frame, offset, flexible, version) walks a Produce request body from `offset` (the
 * end of the request header) exactly as walk_produce_request's Python reference does, and
 * returns the same ProduceShape, or None when the request is not of the usual shape this walk
 * knows: a length or count in a varint of more than two bytes, null or negative lengths and
 * counts, tagged fields that are not empty, invalid UTF-8, or anything malformed.  The caller
 * then walks the request with the reference, which names the problem.  Nothing here decides
 * what is authorized: it finds the same names, partitions and offsets, and a partition whose
 * records are not exactly one acceptable magic-v2 batch is handed to the reference's
 * check_batch for its error.  Every read is bounds-checked against the buffer's length.
 *
 * bind(TopicSpan, ProduceShape, UUID, check_batch) gives the module the classes it builds
 * and the function it asks; walk_produce returns None until it has been called.  A topic id's
 * UUID is made once and reused (topic_uuid).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

static PyObject *TopicSpan, *ProduceShape, *Uuid, *CheckBatch, *BytesKw, *Uuids;

#define BATCH_OVERHEAD 61
#define TRANSACTIONAL 0x10
#define CONTROL 0x20
#define ZSTD 4

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
    Py_ssize_t off;
} Cursor;

static int32_t be32(const unsigned char *p)
{
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static int16_t be16(const unsigned char *p)
{
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

/* An unsigned varint of one or two bytes into *v; 0 when longer, or past the end. */
static int short_uvarint(Cursor *c, long *v)
{
    if (c->off >= c->n)
        return 0;
    unsigned char b0 = c->p[c->off];
    if (b0 < 0x80) {
        *v = b0;
        c->off += 1;
        return 1;
    }
    if (c->off + 1 >= c->n)
        return 0;
    unsigned char b1 = c->p[c->off + 1];
    if (b1 >= 0x80)
        return 0;
    *v = (long)(b0 & 0x7F) | ((long)b1 << 7);
    c->off += 2;
    return 1;
}

/* The length of a string or array: compact (varint - 1) when flexible, else int16 or int32. */
static int length_of(Cursor *c, int flexible, int wide, long *len)
{
    if (flexible) {
        long v;
        if (!short_uvarint(c, &v))
            return 0;
        *len = v - 1;
        return 1;
    }
    Py_ssize_t size = wide ? 4 : 2;
    if (c->off + size > c->n)
        return 0;
    *len = wide ? be32(c->p + c->off) : be16(c->p + c->off);
    c->off += size;
    return 1;
}

/* An empty tagged-field section (one zero byte) when flexible; 0 otherwise. */
static int empty_tags(Cursor *c, int flexible)
{
    if (!flexible)
        return 1;
    if (c->off >= c->n || c->p[c->off] != 0)
        return 0;
    c->off += 1;
    return 1;
}

/* A string: *out a new reference (Py_None for null when nullable).  0: not the usual shape;
 * -1: a Python error is set. */
static int string_at(Cursor *c, int flexible, int nullable, PyObject **out)
{
    long len;
    if (!length_of(c, flexible, 0, &len))
        return 0;
    if (len < 0) {
        if (len != -1 || !nullable)
            return 0;
        *out = Py_NewRef(Py_None);
        return 1;
    }
    if (c->off + len > c->n)
        return 0;
    PyObject *s = PyUnicode_DecodeUTF8((const char *)c->p + c->off, len, "strict");
    if (s == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    c->off += len;
    *out = s;
    return 1;
}

/* Whether the records at [start, end) are exactly one batch a client may write (the
 * reference's check_batch returning None). */
static int batch_ok(const unsigned char *p, Py_ssize_t start, Py_ssize_t end, long version)
{
    Py_ssize_t size = end - start;
    if (size < BATCH_OVERHEAD)
        return 0;
    if (p[start + 16] != 2)
        return 0;
    if ((Py_ssize_t)be32(p + start + 8) + 12 != size)
        return 0;
    unsigned char attributes = p[start + 22];
    if (attributes & CONTROL)
        return 0;
    if (version < 7 && (attributes & 0x07) == ZSTD)
        return 0;
    return 1;
}

/* Append `item`, a new reference (NULL: its making failed), to `list`, and drop it.  0, or -1
 * with an error set. */
static int append_new(PyObject *list, PyObject *item)
{
    if (item == NULL)
        return -1;
    int appended = PyList_Append(list, item);
    Py_DECREF(item);
    return appended;
}

/* (a, b) of two offsets: a new reference, NULL with an error set. */
static PyObject *pair(Py_ssize_t a, Py_ssize_t b)
{
    PyObject *first = PyLong_FromSsize_t(a), *second = first ? PyLong_FromSsize_t(b) : NULL;
    if (second == NULL) {
        Py_XDECREF(first);
        return NULL;
    }
    PyObject *t = PyTuple_New(2);
    if (t == NULL) {
        Py_DECREF(first);
        Py_DECREF(second);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, first);
    PyTuple_SET_ITEM(t, 1, second);
    return t;
}

/* cls(*args) where args[at : at + count] are the offsets given, as ints. */
static PyObject *call_with_offsets(PyObject *cls, PyObject **args, Py_ssize_t nargs, Py_ssize_t at,
                                   const Py_ssize_t *offsets, Py_ssize_t count)
{
    PyObject *result = NULL;
    Py_ssize_t made = 0;
    for (; made < count; made++) {
        if ((args[at + made] = PyLong_FromSsize_t(offsets[made])) == NULL)
            goto done;
    }
    result = PyObject_Vectorcall(cls, args, (size_t)nargs, NULL);
done:
    for (Py_ssize_t i = 0; i < made; i++)
        Py_DECREF(args[at + i]);
    return result;
}

/* The uuid.UUID of 16 bytes: made once per topic id and kept (a UUID is immutable), up to
 * UUIDS_KEPT of them, the table emptied when full.  A new reference; NULL with an error set. */
#define UUIDS_KEPT 16384

static PyObject *topic_uuid(const unsigned char *raw16)
{
    PyObject *raw = PyBytes_FromStringAndSize((const char *)raw16, 16);
    if (raw == NULL)
        return NULL;
    PyObject *known = PyDict_GetItemWithError(Uuids, raw);
    if (known != NULL) {
        Py_DECREF(raw);
        return Py_NewRef(known);
    }
    if (PyErr_Occurred()) {
        Py_DECREF(raw);
        return NULL;
    }
    PyObject *args[1] = {raw};
    PyObject *made = PyObject_Vectorcall(Uuid, args, 0, BytesKw);
    if (made != NULL) {
        if (PyDict_GET_SIZE(Uuids) >= UUIDS_KEPT)
            PyDict_Clear(Uuids);
        if (PyDict_SetItem(Uuids, raw, made) < 0)
            Py_CLEAR(made);
    }
    Py_DECREF(raw);
    return made;
}

#define NOT_USUAL 0
#define FAILED -1

/* One topic entry; appends a TopicSpan to `topics`.  1, NOT_USUAL or FAILED. */
static int walk_topic(Cursor *c, PyObject *frame, int flexible, long version, PyObject *topics,
                      int *transactional, int *any_invalid)
{
    Py_ssize_t start = c->off;
    PyObject *name = NULL, *topic_id = NULL, *partitions = NULL, *spans = NULL, *invalid = NULL;
    int result = NOT_USUAL;

    if (version >= 13) {
        if (c->off + 16 > c->n)
            goto done;
        if ((topic_id = topic_uuid(c->p + c->off)) == NULL)
            goto failed;
        name = Py_NewRef(Py_None);
        c->off += 16;
    } else {
        int got = string_at(c, flexible, 0, &name);
        if (got < 0)
            goto failed;
        if (got == 0)
            goto done;
        topic_id = Py_NewRef(Py_None);
    }
    Py_ssize_t parts_at = c->off;
    long n_parts;
    if (!length_of(c, flexible, 1, &n_parts) || n_parts < 0)
        goto done;
    if ((partitions = PyList_New(0)) == NULL || (spans = PyList_New(0)) == NULL)
        goto failed;
    for (long i = 0; i < n_parts; i++) {
        Py_ssize_t p_start = c->off;
        if (c->off + 4 > c->n)
            goto done;
        if (append_new(partitions, PyLong_FromLong(be32(c->p + c->off))) < 0)
            goto failed;
        c->off += 4;
        long size;
        if (!length_of(c, flexible, 1, &size) || size < 0 || c->off + size > c->n)
            goto done;
        Py_ssize_t rec_start = c->off, rec_end = c->off + size;
        c->off = rec_end;
        if (size >= 23 && (c->p[rec_start + 22] & TRANSACTIONAL))
            *transactional = 1;
        if (!batch_ok(c->p, rec_start, rec_end, version)) {
            PyObject *problem = PyObject_CallFunction(CheckBatch, "Onnl", frame, rec_start, rec_end, version);
            if (problem == NULL)
                goto failed;
            if (problem != Py_None) {
                if (invalid == NULL && (invalid = PyDict_New()) == NULL) {
                    Py_DECREF(problem);
                    goto failed;
                }
                PyObject *at = PyLong_FromSsize_t(PyList_GET_SIZE(partitions) - 1);
                int stored = at == NULL ? -1 : PyDict_SetItem(invalid, at, problem);
                Py_XDECREF(at);
                if (stored < 0) {
                    Py_DECREF(problem);
                    goto failed;
                }
                *any_invalid = 1;
            }
            Py_DECREF(problem);
        }
        if (!empty_tags(c, flexible))
            goto done;
        if (append_new(spans, pair(p_start, c->off)) < 0)
            goto failed;
    }
    Py_ssize_t parts_end = c->off;
    if (!empty_tags(c, flexible))
        goto done;
    Py_ssize_t offsets[4] = {start, c->off, parts_at, parts_end};
    PyObject *args[9] = {name, partitions, NULL, NULL, NULL, NULL, spans, invalid ? invalid : Py_None, topic_id};
    if (append_new(topics, call_with_offsets(TopicSpan, args, 9, 2, offsets, 4)) < 0)
        goto failed;
    result = 1;
    goto done;
failed:
    result = FAILED;
done:
    Py_XDECREF(name);
    Py_XDECREF(topic_id);
    Py_XDECREF(partitions);
    Py_XDECREF(spans);
    Py_XDECREF(invalid);
    return result;
}

static PyObject *walk(PyObject *frame, const unsigned char *p, Py_ssize_t n, Py_ssize_t off, int flexible,
                      long version)
{
    Cursor c = {p, n, off};
    PyObject *txn = NULL, *topics = NULL, *shape = NULL;
    int got = string_at(&c, flexible, 1, &txn);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);
    if (c.off + 6 > c.n)
        goto not_usual;
    int acks = be16(p + c.off);
    long timeout_ms = be32(p + c.off + 2);
    c.off += 6;
    Py_ssize_t topics_at = c.off;
    long n_topics;
    if (!length_of(&c, flexible, 1, &n_topics) || n_topics < 0)
        goto not_usual;
    if ((topics = PyList_New(0)) == NULL)
        goto failed;
    int transactional = 0, any_invalid = 0;
    for (long t = 0; t < n_topics; t++) {
        int walked = walk_topic(&c, frame, flexible, version, topics, &transactional, &any_invalid);
        if (walked == FAILED)
            goto failed;
        if (walked == NOT_USUAL)
            goto not_usual;
    }
    Py_ssize_t topics_end = c.off;
    if (!empty_tags(&c, flexible) || c.off != c.n)
        goto not_usual;
    PyObject *numbers[2] = {PyLong_FromLong(acks), PyLong_FromLong(timeout_ms)};
    if (numbers[0] != NULL && numbers[1] != NULL) {
        Py_ssize_t offsets[2] = {topics_at, topics_end};
        PyObject *args[8] = {txn, numbers[0], numbers[1], topics, transactional ? Py_True : Py_False, NULL, NULL,
                             any_invalid ? Py_True : Py_False};
        shape = call_with_offsets(ProduceShape, args, 8, 5, offsets, 2);
    }
    Py_XDECREF(numbers[0]);
    Py_XDECREF(numbers[1]);
    Py_DECREF(txn);
    Py_DECREF(topics);
    return shape;
not_usual:
    Py_XDECREF(txn);
    Py_XDECREF(topics);
    Py_RETURN_NONE;
failed:
    Py_XDECREF(txn);
    Py_XDECREF(topics);
    return NULL;
}

static PyObject *walk_produce(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "walk_produce(frame, offset, flexible, version)");
        return NULL;
    }
    if (TopicSpan == NULL)
        Py_RETURN_NONE;
    Py_ssize_t off = PyLong_AsSsize_t(args[1]);
    if (off == -1 && PyErr_Occurred())
        return NULL;
    int flexible = PyObject_IsTrue(args[2]);
    if (flexible < 0)
        return NULL;
    long version = PyLong_AsLong(args[3]);
    if (version == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) {  /* not one contiguous buffer */
        if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_TypeError))
            return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;  /* the reference walks it */
    }
    PyObject *shape;
    if (off < 0 || off > view.len)
        shape = Py_NewRef(Py_None);
    else
        shape = walk(args[0], (const unsigned char *)view.buf, view.len, off, flexible, version);
    PyBuffer_Release(&view);
    return shape;
}

static PyObject *bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "bind(TopicSpan, ProduceShape, UUID, check_batch)");
        return NULL;
    }
    Py_XSETREF(TopicSpan, Py_NewRef(args[0]));
    Py_XSETREF(ProduceShape, Py_NewRef(args[1]));
    Py_XSETREF(Uuid, Py_NewRef(args[2]));
    Py_XSETREF(CheckBatch, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

static PyObject *uuids_kept(PyObject *module, PyObject *unused)
{
    return PyLong_FromSsize_t(PyDict_GET_SIZE(Uuids));
}

static PyMethodDef methods[] = {
    {"uuids_kept", uuids_kept, METH_NOARGS, "uuids_kept() -> how many topic ids' UUIDs are kept now"},
    {"walk_produce", (PyCFunction)(void (*)(void))walk_produce, METH_FASTCALL,
     "walk_produce(frame, offset, flexible, version) -> ProduceShape | None"},
    {"bind", (PyCFunction)(void (*)(void))bind, METH_FASTCALL,
     "bind(TopicSpan, ProduceShape, UUID, check_batch): what walk_produce builds and asks"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "protocol._native", "kgw's byte path in C (see protocol/_native.c)", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void)
{
    if (BytesKw == NULL && (BytesKw = Py_BuildValue("(s)", "bytes")) == NULL)
        return NULL;
    if (Uuids == NULL && (Uuids = PyDict_New()) == NULL)
        return NULL;
    return PyModule_Create(&module_def);
}
