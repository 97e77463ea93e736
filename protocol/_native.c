/* The request header and the Produce walks of protocol/headers.py and protocol/apis/produce.py,
 * in C: the byte path only.
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
 * produce_sole(frame, offset, flexible, version) walks the same request for what the dispatcher's
 * express path (gateway/connection/_plane_steps.c) needs of the usual one: its one topic's name
 * (v13+: its id's UUID) and partition count, acks and timeout, when it names one topic and every
 * partition holds one batch batch_ok passes, none transactional (what produce.py's _sole_action
 * asks the decision memo about); None for any other request, which the dispatcher then walks as
 * always.
 *
 * produce_response_tags(frame, offset, version) says whether a flexible Produce response ends with
 * tagged fields (KIP-951's node endpoints, which kgw rewrites), for the usual shape only (short
 * varints, no record errors, no tagged fields before the end), and None for any other or for
 * anything malformed: produce.py's Python walk then reads it and names what is wrong.
 *
 * metadata_partitions_end(buf, offset, version, count) skips a Metadata response topic's partitions
 * (protocol/apis/metadata.py's answer walk; None for anything that walk would not read alike).
 *
 * request_header(body) parses the usual request header as protocol/headers.py's reference
 * (parse_request_header_python) does, and returns None for any other (see request_header).
 *
 * The objects returned are made without running their classes' __init__: their slots are
 * filled directly (Layout), the slots named here checked when the classes are bound.
 *
 * bind(TopicSpan, ProduceShape, UUID, check_batch) gives the module the classes it builds
 * and the function it asks; walk_produce returns None until it has been called, and
 * bind_header(RequestHeader, is_flexible) does the same for request_header.  A topic id's
 * UUID is made once and reused (topic_uuid).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>

static PyObject *TopicSpan, *ProduceShape, *Uuid, *CheckBatch, *BytesKw, *Uuids, *IsFlexible;

/* Where a class keeps each of its fields: the offsets of its __slots__ in an instance, so that
 * the objects the walks return are made without running their __init__ in the interpreter.
 * Found by bind*() from the class's own member descriptors, which must all be object slots. */
#define MAX_FIELDS 9

typedef struct {
    PyTypeObject *type;
    Py_ssize_t n;
    Py_ssize_t offsets[MAX_FIELDS];
} Layout;

static Layout TopicSpanLayout, ProduceShapeLayout, HeaderLayout;

/* The layout of `cls` for `names` (its fields, in the order build() is given their values).
 * 0, or -1 with an error set when one is not a writable object slot of that very class. */
static int layout_of(PyObject *cls, const char *const *names, Py_ssize_t n, Layout *out)
{
    if (!PyType_Check(cls) || n > MAX_FIELDS) {
        PyErr_SetString(PyExc_TypeError, "a class with __slots__ is needed");
        return -1;
    }
    PyTypeObject *type = (PyTypeObject *)cls;
    Py_ssize_t offsets[MAX_FIELDS];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyDict_GetItemString(type->tp_dict, names[i]);
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type) || PyDescr_TYPE(d) != type
                || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX
                || (((PyMemberDescrObject *)d)->d_member->flags & READONLY)) {
            PyErr_Format(PyExc_TypeError, "%s.%s is not an object slot", type->tp_name, names[i]);
            return -1;
        }
        offsets[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    Py_XSETREF(out->type, (PyTypeObject *)Py_NewRef(cls));
    out->n = n;
    memcpy(out->offsets, offsets, sizeof(offsets[0]) * (size_t)n);
    return 0;
}

/* A new instance of the layout's class holding `values` (new references are taken), its
 * __init__ not run; NULL with an error set. */
static PyObject *build(const Layout *layout, PyObject *const *values)
{
    PyObject *obj = layout->type->tp_alloc(layout->type, 0);
    if (obj == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < layout->n; i++)
        *(PyObject **)((char *)obj + layout->offsets[i]) = Py_NewRef(values[i]);
    return obj;
}

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

/* An unsigned varint of at most five bytes whose value fits an int32 (what Kafka's
 * ByteUtils.readUnsignedVarint reads as a length) into *v; 0 when not, or past the end. */
static int uvarint32(Cursor *c, long *v)
{
    if (c->off < c->n && c->p[c->off] < 0x80) {  /* the usual one byte */
        *v = c->p[c->off];
        c->off += 1;
        return 1;
    }
    uint64_t value = 0;
    for (int i = 0; i < 5; i++) {
        if (c->off + i >= c->n)
            return 0;
        unsigned char b = c->p[c->off + i];
        value |= (uint64_t)(b & 0x7F) << (7 * i);
        if (b < 0x80) {
            if (value > INT32_MAX)
                return 0;
            *v = (long)value;
            c->off += i + 1;
            return 1;
        }
    }
    return 0;
}

/* The length of a string or array: compact (varint - 1) when flexible, else int16 or int32. */
static int length_of(Cursor *c, int flexible, int wide, long *len)
{
    if (flexible) {
        long v;
        if (!uvarint32(c, &v))
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

/* The bytes of `obj` into *view (release it): 1; 0 when `obj` is not one contiguous buffer (the
 * caller declines it to the Python reference); -1 with an error set. */
static int contiguous(PyObject *obj, Py_buffer *view)
{
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) == 0)
        return 1;
    if (!PyErr_ExceptionMatches(PyExc_BufferError) && !PyErr_ExceptionMatches(PyExc_TypeError))
        return -1;
    PyErr_Clear();
    return 0;
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

/* build(layout, args) where args[at : at + count] are the offsets given, as ints. */
static PyObject *build_with_offsets(const Layout *layout, PyObject **args, Py_ssize_t at,
                                    const Py_ssize_t *offsets, Py_ssize_t count)
{
    PyObject *result = NULL;
    Py_ssize_t made = 0;
    for (; made < count; made++) {
        if ((args[at + made] = PyLong_FromSsize_t(offsets[made])) == NULL)
            goto done;
    }
    result = build(layout, args);
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

/* One topic entry; appends a TopicSpan to `topics`.  1, NOT_USUAL or FAILED.  With `topics`
 * NULL (produce_sole's walk) nothing is built: *sole_name (a new reference) and *sole_parts get
 * the topic's name (v13+: its id, a UUID) and partition count, and a partition whose records
 * fail batch_ok is NOT_USUAL (the reference then says what it is). */
static int walk_topic(Cursor *c, PyObject *frame, int flexible, long version, PyObject *topics,
                      int *transactional, int *any_invalid, PyObject **sole_name, long *sole_parts)
{
    Py_ssize_t start = c->off;
    PyObject *name = NULL, *topic_id = NULL, *partitions = NULL, *spans = NULL, *invalid = NULL;
    int result = NOT_USUAL, build_it = topics != NULL;

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
    if (build_it && ((partitions = PyList_New(0)) == NULL || (spans = PyList_New(0)) == NULL))
        goto failed;
    for (long i = 0; i < n_parts; i++) {
        Py_ssize_t p_start = c->off;
        if (c->off + 4 > c->n)
            goto done;
        if (build_it && append_new(partitions, PyLong_FromLong(be32(c->p + c->off))) < 0)
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
            if (!build_it)
                goto done;
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
        if (build_it && append_new(spans, pair(p_start, c->off)) < 0)
            goto failed;
    }
    Py_ssize_t parts_end = c->off;
    if (!empty_tags(c, flexible))
        goto done;
    if (!build_it) {
        *sole_name = Py_NewRef(version >= 13 ? topic_id : name);
        *sole_parts = n_parts;
        result = 1;
        goto done;
    }
    Py_ssize_t offsets[4] = {start, c->off, parts_at, parts_end};
    PyObject *args[9] = {name, partitions, NULL, NULL, NULL, NULL, spans, invalid ? invalid : Py_None, topic_id};
    if (append_new(topics, build_with_offsets(&TopicSpanLayout, args, 2, offsets, 4)) < 0)
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

/* A Produce request's head: its transactional id (*txn, a new reference), acks, timeout, where its
 * topic array begins and its count, the cursor then at the first topic.  1 (*txn set), NOT_USUAL
 * or FAILED; a count that is not usual (or no room for acks and the timeout) is -1. */
static int walk_head(Cursor *c, int flexible, PyObject **txn, int *acks, long *timeout_ms,
                     Py_ssize_t *topics_at, long *n_topics)
{
    int got = string_at(c, flexible, 1, txn);
    if (got <= 0)
        return got < 0 ? FAILED : NOT_USUAL;
    *n_topics = -1;
    if (c->off + 6 > c->n)
        return 1;
    *acks = be16(c->p + c->off);
    *timeout_ms = be32(c->p + c->off + 2);
    c->off += 6;
    *topics_at = c->off;
    if (!length_of(c, flexible, 1, n_topics))
        *n_topics = -1;
    return 1;
}

static PyObject *walk(PyObject *frame, const unsigned char *p, Py_ssize_t n, Py_ssize_t off, int flexible,
                      long version)
{
    Cursor c = {p, n, off};
    PyObject *txn = NULL, *topics = NULL, *shape = NULL;
    int acks = 0;
    long timeout_ms = 0, n_topics = -1;
    Py_ssize_t topics_at = 0;
    int got = walk_head(&c, flexible, &txn, &acks, &timeout_ms, &topics_at, &n_topics);
    if (got != 1)
        return got == FAILED ? NULL : Py_NewRef(Py_None);
    if (n_topics < 0)
        goto not_usual;
    if ((topics = PyList_New(0)) == NULL)
        goto failed;
    int transactional = 0, any_invalid = 0;
    for (long t = 0; t < n_topics; t++) {
        int walked = walk_topic(&c, frame, flexible, version, topics, &transactional, &any_invalid, NULL, NULL);
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
        shape = build_with_offsets(&ProduceShapeLayout, args, 5, offsets, 2);
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

/* The frame args[0] and the offset args[1] and version args[version_at] a walk is asked for:
 * 1 with *view held (release it) and *off within it; 0 when the walk declines (not one
 * contiguous buffer, or an offset outside it: the reference takes it); -1 with an error set. */
static int walk_args(PyObject *const *args, Py_ssize_t version_at, Py_buffer *view, Py_ssize_t *off,
                     long *version)
{
    *off = PyLong_AsSsize_t(args[1]);
    if (*off == -1 && PyErr_Occurred())
        return -1;
    *version = PyLong_AsLong(args[version_at]);
    if (*version == -1 && PyErr_Occurred())
        return -1;
    int got = contiguous(args[0], view);
    if (got <= 0)
        return got;
    if (*off < 0 || *off > view->len) {
        PyBuffer_Release(view);
        return 0;
    }
    return 1;
}

/* The usual Produce request of one topic whose partitions each hold one batch batch_ok passes and
 * none a transactional one: (name, or v13+ topic id, partition count, acks, timeout ms); None for
 * any other shape and for anything walk() would not take. */
static PyObject *sole_of(const unsigned char *p, Py_ssize_t n, Py_ssize_t off, int flexible, long version)
{
    Cursor c = {p, n, off};
    PyObject *txn = NULL, *name = NULL;
    int acks = 0, transactional = 0, any_invalid = 0;
    long timeout_ms = 0, n_topics = -1, n_parts = 0;
    Py_ssize_t topics_at = 0;
    int got = walk_head(&c, flexible, &txn, &acks, &timeout_ms, &topics_at, &n_topics);
    if (got != 1)
        return got == FAILED ? NULL : Py_NewRef(Py_None);
    Py_DECREF(txn);
    if (n_topics != 1)
        Py_RETURN_NONE;
    got = walk_topic(&c, NULL, flexible, version, NULL, &transactional, &any_invalid, &name, &n_parts);
    if (got != 1)
        return got == FAILED ? NULL : Py_NewRef(Py_None);
    PyObject *sole = NULL;
    if (transactional || !empty_tags(&c, flexible) || c.off != c.n)
        sole = Py_NewRef(Py_None);
    else
        sole = Py_BuildValue("(Olil)", name, n_parts, acks, timeout_ms);
    Py_DECREF(name);
    return sole;
}

/* walk_produce's and produce_sole's arguments (frame, offset, flexible, version) read and their
 * walk run: walk() (None until bind() was called), or sole_of() when `sole`. */
static PyObject *produce_walk_of(PyObject *const *args, Py_ssize_t nargs, const char *usage, int sole)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    if (!sole && TopicSpan == NULL)
        Py_RETURN_NONE;
    int flexible = PyObject_IsTrue(args[2]);
    if (flexible < 0)
        return NULL;
    Py_buffer view;
    Py_ssize_t off;
    long version;
    int got = walk_args(args, 3, &view, &off, &version);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);
    const unsigned char *p = (const unsigned char *)view.buf;
    PyObject *walked = sole ? sole_of(p, view.len, off, flexible, version)
                            : walk(args[0], p, view.len, off, flexible, version);
    PyBuffer_Release(&view);
    return walked;
}

static PyObject *walk_produce(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return produce_walk_of(args, nargs, "walk_produce(frame, offset, flexible, version)", 0);
}

static PyObject *produce_sole(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return produce_walk_of(args, nargs, "produce_sole(frame, offset, flexible, version)", 1);
}


/* Skips a compact string (null or not); 0 when it does not fit in the buffer. */
static int skip_compact_string(Cursor *c)
{
    long len;
    if (!length_of(c, 1, 0, &len))
        return 0;
    if (len > 0) {
        if (len > c->n - c->off)
            return 0;
        c->off += len;
    }
    return 1;
}

/* Whether a flexible Produce response ends with tagged fields, for the usual shape: short
 * varints, no record errors, no tagged fields before the end; -1 for anything else. */
static int response_tags_at(Cursor *c, long version)
{
    long topics, partitions, count;
    if (!short_uvarint(c, &topics))
        return -1;
    for (long t = 1; t < topics; t++) {
        if (version >= 13) {  /* the topic id */
            if (c->n - c->off < 16)
                return -1;
            c->off += 16;
        } else if (!skip_compact_string(c)) {  /* the name */
            return -1;
        }
        if (!short_uvarint(c, &partitions))
            return -1;
        for (long p = 1; p < partitions; p++) {
            /* index, error code, base offset, log append time, log start offset */
            if (c->n - c->off < 30)
                return -1;
            c->off += 30;
            if (!short_uvarint(c, &count) || count > 1)  /* record errors: the reference reads them */
                return -1;
            if (!skip_compact_string(c) || !empty_tags(c, 1))  /* the error message; current_leader */
                return -1;
        }
        if (!empty_tags(c, 1))
            return -1;
    }
    if (c->n - c->off < 4)  /* the throttle time */
        return -1;
    c->off += 4;
    if (!short_uvarint(c, &count))
        return -1;
    return count != 0;
}

/* The (frame, offset, version, then arity - 3 more) of a walk as a cursor on the frame's bytes
 * (release *view): 1; 0 when the walk declines (None); -1 with an error set. */
static int response_cursor(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t arity, const char *usage,
                           Py_buffer *view, Cursor *c, long *version)
{
    if (nargs != arity) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    Py_ssize_t off;
    int got = walk_args(args, 2, view, &off, version);
    if (got <= 0)
        return got;
    *c = (Cursor){(const unsigned char *)view->buf, view->len, off};
    return 1;
}

static PyObject *produce_response_tags(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Cursor c;
    long version;
    int got = response_cursor(args, nargs, 3, "produce_response_tags(frame, offset, version)", &view, &c, &version);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);
    int found = response_tags_at(&c, version);
    PyBuffer_Release(&view);
    if (found < 0)
        Py_RETURN_NONE;
    return PyBool_FromLong(found);
}

/* A Fetch request's topic key: its id (v13+; Py_None for the all-zero id, as kio reads it) or
 * its name.  1, NOT_USUAL or FAILED; *key a new reference when 1. */
static int fetch_key(Cursor *c, int flexible, long version, PyObject **key)
{
    if (version >= 13) {
        static const unsigned char zero[16];
        if (c->n - c->off < 16)
            return NOT_USUAL;
        if (memcmp(c->p + c->off, zero, 16) == 0)
            *key = Py_NewRef(Py_None);
        else if ((*key = topic_uuid(c->p + c->off)) == NULL)
            return FAILED;
        c->off += 16;
        return 1;
    }
    int got = string_at(c, flexible, 0, key);
    return got < 0 ? FAILED : got;
}

/* One list of Fetch topic entries ((key, [partition, ...]) tuples) at the cursor: the request's
 * topics (`step`: the bytes of a partition after its index, tagged fields following when
 * flexible) or its forgotten topics (`step` -1: bare int32 partitions).  1, NOT_USUAL or FAILED;
 * *out a new reference when 1. */
static int fetch_entries(Cursor *c, int flexible, long version, Py_ssize_t step, PyObject **out)
{
    long n, count;
    if (!length_of(c, flexible, 1, &n) || n < 0)
        return NOT_USUAL;
    PyObject *entries = PyList_New(0);
    if (entries == NULL)
        return FAILED;
    for (long i = 0; i < n; i++) {
        PyObject *key = NULL, *parts = NULL;
        int got = fetch_key(c, flexible, version, &key);
        if (got != 1) {
            Py_DECREF(entries);
            return got;
        }
        if (!length_of(c, flexible, 1, &count) || count < 0 || (parts = PyList_New(0)) == NULL) {
            Py_DECREF(key);
            Py_DECREF(entries);
            return parts == NULL && PyErr_Occurred() ? FAILED : NOT_USUAL;
        }
        for (long j = 0; j < count; j++) {
            Py_ssize_t need = 4 + (step < 0 ? 0 : step + (flexible ? 1 : 0));
            if (c->n - c->off < need || (step >= 0 && flexible && c->p[c->off + 4 + step] != 0)) {
                Py_DECREF(key);
                Py_DECREF(parts);
                Py_DECREF(entries);
                return NOT_USUAL;  /* past the end, or a partition's tagged field set */
            }
            if (append_new(parts, PyLong_FromLong(be32(c->p + c->off))) < 0) {
                Py_DECREF(key);
                Py_DECREF(parts);
                Py_DECREF(entries);
                return FAILED;
            }
            c->off += need;
        }
        if (!empty_tags(c, flexible)) {
            Py_DECREF(key);
            Py_DECREF(parts);
            Py_DECREF(entries);
            return NOT_USUAL;
        }
        PyObject *entry = PyTuple_Pack(2, key, parts);
        Py_DECREF(key);
        Py_DECREF(parts);
        if (append_new(entries, entry) < 0) {
            Py_DECREF(entries);
            return FAILED;
        }
    }
    *out = entries;
    return 1;
}

/* walk_fetch(frame, offset, version): what protocol/apis/fetch.py's walk_fetch_request_python
 * reads of a consumer's usual Fetch request (v4-v18), as (replica id, max wait, session id,
 * session epoch, topics, forgotten topics); None for anything else (a tagged field set, a
 * null or negative count, a name or rack that is not UTF-8, a field past the end): the
 * reference then reads it, or leaves it to kio. */
static PyObject *walk_fetch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (Uuid == NULL)  /* bound with the Produce walk (protocol/apis/produce.py) */
        Py_RETURN_NONE;
    Py_buffer view;
    Cursor c;
    long version;
    int got = response_cursor(args, nargs, 3, "walk_fetch(frame, offset, version)", &view, &c, &version);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *topics = NULL, *forgotten = NULL, *rack = NULL, *result = NULL;
    int flexible = version >= 12;
    long replica_id = -1, max_wait, session_id = 0, epoch = -1;
    if (version < 4 || version > 18)
        goto done;
    Py_ssize_t fixed = (version < 15 ? 4 : 0) + 13 + (version >= 7 ? 8 : 0);
    if (c.n - c.off < fixed)
        goto done;
    if (version < 15) {
        replica_id = be32(c.p + c.off);
        c.off += 4;
    }
    max_wait = be32(c.p + c.off);
    c.off += 13;  /* max wait, min bytes, max bytes, isolation level */
    if (version >= 7) {
        session_id = be32(c.p + c.off);
        epoch = be32(c.p + c.off + 4);
        c.off += 8;
    }
    Py_ssize_t step = (version >= 9 ? 4 : 0) + 8 + (version >= 12 ? 4 : 0) + (version >= 5 ? 8 : 0) + 4;
    if ((got = fetch_entries(&c, flexible, version, step, &topics)) != 1)
        goto declined;
    if (version >= 7) {
        if ((got = fetch_entries(&c, flexible, version, -1, &forgotten)) != 1)
            goto declined;
    } else if ((forgotten = PyList_New(0)) == NULL) {
        goto done;
    }
    if (version >= 11) {
        if ((got = string_at(&c, flexible, 0, &rack)) != 1)
            goto declined;
    }
    if (!empty_tags(&c, flexible))  /* cluster_id or a follower's replica_state set */
        goto done;
    result = Py_BuildValue("llllOO", replica_id, max_wait, session_id, epoch, topics, forgotten);
    goto done;
declined:
    if (got == FAILED)
        goto done;  /* (the error set stays: result is NULL) */
done:
    PyBuffer_Release(&view);
    Py_XDECREF(topics);
    Py_XDECREF(forgotten);
    Py_XDECREF(rack);
    if (result == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return result;
}

/* Skips a flexible tagged-field section: 0 when it does not fit in the buffer, or a varint is
 * not one Kafka reads as an int32. */
static int skip_tags(Cursor *c)
{
    long count, tag, size;
    if (c->off < c->n && c->p[c->off] == 0) {  /* none: the usual case */
        c->off += 1;
        return 1;
    }
    if (!uvarint32(c, &count))
        return 0;
    for (long i = 0; i < count; i++) {
        if (!uvarint32(c, &tag) || !uvarint32(c, &size) || size > c->n - c->off)
            return 0;
        c->off += size;
    }
    return 1;
}

/* Where the top-level tagged fields of a Fetch response body of v13 or later (topics by id)
 * start, the records passed over by length: the walk of protocol/apis/fetch.py's
 * walk_fetch_response, its reference, for what it reads without complaint: -1 for anything
 * else (a count or length not a compact int32, a field past the end). */
static Py_ssize_t fetch_tags_at(Cursor *c)
{
    long topics, partitions, aborted, size;
    if (c->n - c->off < 10)  /* throttle time, error code, session id */
        return -1;
    c->off += 10;
    if (!uvarint32(c, &topics))
        return -1;
    for (long t = 1; t < topics; t++) {
        if (c->n - c->off < 16)  /* the topic id */
            return -1;
        c->off += 16;
        if (!uvarint32(c, &partitions))
            return -1;
        for (long p = 1; p < partitions; p++) {
            /* index, error code, high watermark, last stable offset, log start offset */
            if (c->n - c->off < 30)
                return -1;
            c->off += 30;
            if (!uvarint32(c, &aborted))  /* 0: null, as 1: none */
                return -1;
            for (long a = 1; a < aborted; a++) {
                if (c->n - c->off < 16)  /* producer id, first offset */
                    return -1;
                c->off += 16;
                if (!skip_tags(c))
                    return -1;
            }
            if (c->n - c->off < 4)  /* preferred read replica */
                return -1;
            c->off += 4;
            if (!uvarint32(c, &size))  /* the records: 0 null, as 1 empty */
                return -1;
            if (size > 1) {
                if (size - 1 > c->n - c->off)
                    return -1;
                c->off += size - 1;
            }
            if (!skip_tags(c))
                return -1;
        }
        if (!skip_tags(c))
            return -1;
    }
    Py_ssize_t at = c->off;
    if (!skip_tags(c))
        return -1;
    return at;
}

static PyObject *fetch_response_tags(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Cursor c;
    long version;
    int got = response_cursor(args, nargs, 3, "fetch_response_tags(frame, offset, version)", &view, &c, &version);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);
    if (version < 13) {  /* (names: the reference reads them as UTF-8) */
        PyBuffer_Release(&view);
        Py_RETURN_NONE;
    }
    Py_ssize_t at = fetch_tags_at(&c);
    PyBuffer_Release(&view);
    if (at < 0)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(at);
}

/* FrameCursor: the part of protocol/framing.py's FrameDecoder every frame goes through, in C: the
 * chunk last received, the position in it, the bytes of a split frame assembled so far and
 * the size limit, with next_frame() and receive_data() for the usual case: whole frames in
 * the chunk.  Everything else (a frame split across reads, a frame over the limit, a deferred
 * frame) is the Python subclass's: called by name (_continue, _check, _start_partial,
 * materialize) exactly where framing.py's reference cursor (_FrameCursorPython) calls it. */
typedef struct {
    PyObject_HEAD
    PyObject *chunk;
    Py_ssize_t pos;
    Py_ssize_t fill;
    Py_ssize_t limit;
    char deferred;
} FrameCursor;

static PyObject *NeedData, *EmptyView, *S_continue, *S_check, *S_start_partial, *S_materialize;

static int cursor_traverse(FrameCursor *self, visitproc visit, void *arg)
{
    Py_VISIT(self->chunk);
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static int cursor_clear(FrameCursor *self)
{
    Py_CLEAR(self->chunk);
    return 0;
}

static void cursor_dealloc(FrameCursor *self)
{
    PyTypeObject *type = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    cursor_clear(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

/* The chunk's buffer: a 1-D memoryview of bytes (receive_data makes it so), or NULL with an
 * error set. */
static Py_buffer *chunk_buffer(FrameCursor *self)
{
    PyObject *chunk = self->chunk;
    if (chunk == NULL || !PyMemoryView_Check(chunk)) {
        PyErr_SetString(PyExc_TypeError, "FrameCursor._chunk must be a memoryview");
        return NULL;
    }
    Py_buffer *view = PyMemoryView_GET_BUFFER(chunk);
    if (view->ndim > 1 || view->itemsize != 1) {
        PyErr_SetString(PyExc_TypeError, "FrameCursor._chunk must be a memoryview of bytes");
        return NULL;
    }
    return view;
}

static PyObject *cursor_next_frame(FrameCursor *self, PyObject *unused)
{
    if (NeedData == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "bind_framing(NEED_DATA) was not called");
        return NULL;
    }
    if (self->fill)
        return PyObject_CallMethodNoArgs((PyObject *)self, S_continue);
    Py_buffer *view = chunk_buffer(self);
    if (view == NULL)
        return NULL;
    Py_ssize_t pos = self->pos, len = view->len;
    if (len - pos < 4)
        return Py_NewRef(NeedData);
    Py_ssize_t size = be32((const unsigned char *)view->buf + pos);
    if (size < 0 || size > self->limit) {
        PyObject *size_obj = PyLong_FromSsize_t(size);
        PyObject *checked = size_obj ? PyObject_CallMethodOneArg((PyObject *)self, S_check, size_obj) : NULL;
        Py_XDECREF(size_obj);
        if (checked == NULL)
            return NULL;
        Py_DECREF(checked);
    }
    Py_ssize_t end = pos + 4 + size;
    if (end <= len) {
        PyObject *frame = PySequence_GetSlice(self->chunk, pos, end);
        if (frame != NULL)
            self->pos = end;
        return frame;
    }
    PyObject *head = PySequence_GetSlice(self->chunk, pos, len);
    PyObject *whole = head ? PyLong_FromSsize_t(size + 4) : NULL;
    PyObject *started = whole ? PyObject_CallMethodObjArgs((PyObject *)self, S_start_partial, head, whole, NULL) : NULL;
    Py_XDECREF(head);
    Py_XDECREF(whole);
    if (started == NULL)
        return NULL;
    Py_DECREF(started);
    self->pos = len;
    return Py_NewRef(NeedData);
}

static PyObject *cursor_receive_data(FrameCursor *self, PyObject *data)
{
    if (self->deferred) {
        PyObject *done = PyObject_CallMethodNoArgs((PyObject *)self, S_materialize);
        if (done == NULL)
            return NULL;
        Py_DECREF(done);
    }
    Py_buffer *view = chunk_buffer(self);
    if (view == NULL)
        return NULL;
    if (view->len - self->pos > 0) {  /* a partial length prefix (< 4 bytes) left: it starts a frame of its own */
        PyObject *rest = PyBytes_FromStringAndSize((const char *)view->buf + self->pos, view->len - self->pos);
        PyObject *started = rest ? PyObject_CallMethodObjArgs((PyObject *)self, S_start_partial, rest, Py_None, NULL)
                                 : NULL;
        Py_XDECREF(rest);
        if (started == NULL)
            return NULL;
        Py_DECREF(started);
    }
    PyObject *chunk = PyMemoryView_FromObject(data);
    if (chunk == NULL)
        return NULL;
    Py_XSETREF(self->chunk, chunk);
    self->pos = 0;
    Py_RETURN_NONE;
}

static int cursor_init(FrameCursor *self, PyObject *args, PyObject *kwds)
{
    Py_XSETREF(self->chunk, Py_NewRef(EmptyView));
    self->pos = self->fill = 0;
    self->deferred = 0;
    return 0;
}

static PyMethodDef cursor_methods[] = {
    {"next_frame", (PyCFunction)cursor_next_frame, METH_NOARGS,
     "The next whole frame (length prefix included), or NEED_DATA."},
    {"receive_data", (PyCFunction)cursor_receive_data, METH_O, "Feed bytes read from the peer."},
    {NULL, NULL, 0, NULL},
};

/* (len(_chunk) - _pos) + _fill: the data planes ask after every read */
static PyObject *cursor_buffered(FrameCursor *self, void *closure)
{
    Py_buffer *view = chunk_buffer(self);
    return view == NULL ? NULL : PyLong_FromSsize_t(view->len - self->pos + self->fill);
}

static PyGetSetDef cursor_getset[] = {
    {"buffered", (getter)cursor_buffered, NULL, "Bytes received but not yet returned as frames.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef cursor_members[] = {
    {"_chunk", T_OBJECT_EX, offsetof(FrameCursor, chunk), 0, "the unread tail's chunk"},
    {"_pos", T_PYSSIZET, offsetof(FrameCursor, pos), 0, "where the unread tail begins"},
    {"_fill", T_PYSSIZET, offsetof(FrameCursor, fill), 0, "bytes of the frame being assembled so far"},
    {"limit", T_PYSSIZET, offsetof(FrameCursor, limit), 0, "the largest frame body accepted"},
    {"deferred", T_BOOL, offsetof(FrameCursor, deferred), 0, "a trusted peer's large frame held back"},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot cursor_slots[] = {
    {Py_tp_doc, "FrameDecoder's cursor in C (see protocol/_native.c)"},
    {Py_tp_traverse, cursor_traverse},
    {Py_tp_clear, cursor_clear},
    {Py_tp_dealloc, cursor_dealloc},
    {Py_tp_init, cursor_init},
    {Py_tp_methods, cursor_methods},
    {Py_tp_members, cursor_members},
    {Py_tp_getset, cursor_getset},
    {0, NULL},
};

static PyType_Spec cursor_spec = {
    "protocol._native.FrameCursor", sizeof(FrameCursor), 0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC, cursor_slots,
};

static PyObject *bind_framing(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "bind_framing(NEED_DATA)");
        return NULL;
    }
    Py_XSETREF(NeedData, Py_NewRef(args[0]));
    Py_RETURN_NONE;
}

/* frame_buffer(parts, size): a bytearray of size bytes beginning with the parts' bytes, one
 * after the other, the rest not initialized: the frame decoder fills it from the socket before the
 * frame is returned (protocol/framing.py), so nothing is written twice (bytearray(size) would
 * zero it first). */
static PyObject *frame_buffer(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "frame_buffer(parts, size) takes 2 arguments");
        return NULL;
    }
    Py_ssize_t size = PyLong_AsSsize_t(args[1]);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    PyObject *parts = PySequence_Fast(args[0], "frame_buffer: parts must be a sequence");
    if (parts == NULL)
        return NULL;
    PyObject *buffer = size < 0 ? NULL : PyByteArray_FromStringAndSize(NULL, size);
    if (size < 0)
        PyErr_SetString(PyExc_ValueError, "frame_buffer: negative size");
    Py_ssize_t at = 0;
    for (Py_ssize_t i = 0; buffer != NULL && i < PySequence_Fast_GET_SIZE(parts); i++) {
        Py_buffer view;
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(parts, i), &view, PyBUF_C_CONTIGUOUS) < 0) {
            Py_CLEAR(buffer);
            break;
        }
        if (view.len > size - at) {
            PyBuffer_Release(&view);
            PyErr_SetString(PyExc_ValueError, "frame_buffer: the parts exceed the size");
            Py_CLEAR(buffer);
            break;
        }
        memcpy(PyByteArray_AS_STRING(buffer) + at, view.buf, (size_t)view.len);
        at += view.len;
        PyBuffer_Release(&view);
    }
    Py_DECREF(parts);
    return buffer;
}

static const char *const TOPIC_SPAN_FIELDS[] = {"name", "partitions", "start", "end", "parts_at", "parts_end",
                                               "spans", "invalid", "topic_id"};
static const char *const PRODUCE_SHAPE_FIELDS[] = {"transactional_id", "acks", "timeout_ms", "topics", "transactional",
                                                   "topics_at", "topics_end", "any_invalid"};
static const char *const HEADER_FIELDS[] = {"api_key", "api_version", "correlation_id", "client_id", "size", "flexible"};

static PyObject *bind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "bind(TopicSpan, ProduceShape, UUID, check_batch)");
        return NULL;
    }
    if (layout_of(args[0], TOPIC_SPAN_FIELDS, 9, &TopicSpanLayout) < 0
            || layout_of(args[1], PRODUCE_SHAPE_FIELDS, 8, &ProduceShapeLayout) < 0)
        return NULL;
    Py_XSETREF(TopicSpan, Py_NewRef(args[0]));
    Py_XSETREF(ProduceShape, Py_NewRef(args[1]));
    Py_XSETREF(Uuid, Py_NewRef(args[2]));
    Py_XSETREF(CheckBatch, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

/* request_header(body): the RequestHeader of protocol/headers.py at the start of a request
 * body (after the size prefix), as parse_request_header_python finds it, for the usual header:
 * a client id that is null or valid UTF-8, an API key and version is_flexible knows, and no
 * tagged fields when flexible.  None for any other, and for anything malformed: the reference
 * then parses it and names the problem. */
static PyObject *request_header(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "request_header(body)");
        return NULL;
    }
    if (IsFlexible == NULL)
        Py_RETURN_NONE;
    Py_buffer view;
    int got = contiguous(args[0], &view);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);  /* not one contiguous buffer: the reference takes it */
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len, off = 10;
    PyObject *values[6] = {NULL, NULL, NULL, NULL, NULL, NULL}, *header = NULL, *flexible = NULL;
    if (n < 10)
        goto not_usual;
    long cid_len = be16(p + 8);
    if (cid_len == -1) {
        values[3] = Py_NewRef(Py_None);
    } else if (cid_len < 0 || cid_len > n - off) {
        goto not_usual;
    } else {
        values[3] = PyUnicode_DecodeUTF8((const char *)p + off, cid_len, "strict");
        if (values[3] == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                goto failed;
            PyErr_Clear();
            goto not_usual;
        }
        off += cid_len;
    }
    if ((values[0] = PyLong_FromLong(be16(p))) == NULL || (values[1] = PyLong_FromLong(be16(p + 2))) == NULL
            || (values[2] = PyLong_FromLong(be32(p + 4))) == NULL)
        goto failed;
    if ((flexible = PyObject_Vectorcall(IsFlexible, values, 2, NULL)) == NULL)
        goto failed;
    if (flexible == Py_None)
        goto not_usual;
    int is_flexible = PyObject_IsTrue(flexible);
    if (is_flexible < 0)
        goto failed;
    if (is_flexible) {
        if (off >= n || p[off] != 0)
            goto not_usual;
        off += 1;
    }
    if ((values[4] = PyLong_FromSsize_t(off)) == NULL)
        goto failed;
    values[5] = Py_NewRef(is_flexible ? Py_True : Py_False);
    header = build(&HeaderLayout, values);
    goto done;
not_usual:
    header = Py_NewRef(Py_None);
    goto done;
failed:
    header = NULL;
done:
    for (int i = 0; i < 6; i++)
        Py_XDECREF(values[i]);
    Py_XDECREF(flexible);
    PyBuffer_Release(&view);
    return header;
}

static PyObject *bind_header(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "bind_header(RequestHeader, is_flexible)");
        return NULL;
    }
    if (layout_of(args[0], HEADER_FIELDS, 6, &HeaderLayout) < 0)
        return NULL;
    Py_XSETREF(IsFlexible, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyObject *uuids_kept(PyObject *module, PyObject *unused)
{
    return PyLong_FromSsize_t(PyDict_GET_SIZE(Uuids));
}

/* ------------------------------------------------------------------ lengths
 * check_lengths(plan, buf, offset) -> the offset after the entity, or None: protocol/bounds.py's
 * walk of an encoded entity against its plan (bounds._plan: (flexible, steps), each step
 * (kind, argument)), every length and count checked against the bytes left.  None for anything
 * the walk would refuse (or a plan it does not read): bounds._walk, the reference, then walks it
 * again and names what is wrong.  It reads no value; it only moves an offset. */

typedef struct {
    const unsigned char *p;
    Py_ssize_t end;
} LenBuf;

/* an unsigned varint of at most 5 bytes at *off: 0, or -1 (past the end, or longer) */
static int len_uvarint(const LenBuf *b, Py_ssize_t *off, int64_t *value)
{
    int64_t result = 0;
    for (int i = 0; i < 5; i++) {
        if (*off + i >= b->end)
            return -1;
        unsigned char c = b->p[*off + i];
        result |= (int64_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            *off += i + 1;
            *value = result;
            return 0;
        }
    }
    return -1;
}

/* bounds._length: a string or bytes length or an array count (-1: null) into *n: 0, or -1 */
static int len_length(const LenBuf *b, Py_ssize_t *off, int flexible, int wide, int nullable, int64_t *n)
{
    int64_t v;
    if (flexible) {
        if (len_uvarint(b, off, &v) < 0)
            return -1;
        v -= 1;
    } else if (wide) {
        if (*off + 4 > b->end)
            return -1;
        const unsigned char *q = b->p + *off;
        v = (int32_t)((uint32_t)q[0] << 24 | (uint32_t)q[1] << 16 | (uint32_t)q[2] << 8 | q[3]);
        *off += 4;
    } else {
        if (*off + 2 > b->end)
            return -1;
        const unsigned char *q = b->p + *off;
        v = (int16_t)((uint16_t)q[0] << 8 | q[1]);
        *off += 2;
    }
    if (v > b->end - *off)
        return -1;
    if (v < 0 && (v != -1 || !nullable))
        return -1;
    *n = v;
    return 0;
}

/* bounds._tags: a tagged-field section: 0, or -1 */
static int len_tags(const LenBuf *b, Py_ssize_t *off)
{
    if (*off >= b->end)
        return -1;
    if (b->p[*off] == 0) {
        *off += 1;
        return 0;
    }
    int64_t count, tag, size;
    if (len_uvarint(b, off, &count) < 0 || count > b->end - *off)
        return -1;
    for (int64_t i = 0; i < count; i++) {
        if (len_uvarint(b, off, &tag) < 0 || len_uvarint(b, off, &size) < 0 || size > b->end - *off)
            return -1;
        *off += (Py_ssize_t)size;
    }
    return 0;
}

static PyObject *K_skip, *K_var, *K_array, *K_tagged_array, *K_struct, *K_tags;

static int kind_is(PyObject *kind, PyObject *known)
{
    return kind == known || (PyUnicode_Check(kind) && PyUnicode_Compare(kind, known) == 0);
}

/* a Python int argument as a C value: 0, or -1 (not an int, or out of range; no error left set) */
static int len_int(PyObject *value, int64_t *out)
{
    if (!PyLong_Check(value))
        return -1;
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *out = v;
    return 0;
}

/* bounds._walk: 0, or -1 (declined: the reference walks it); depth bounds a malformed plan */
static int len_walk(PyObject *plan, const LenBuf *b, Py_ssize_t *off, int depth)
{
    if (depth > 64 || !PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 2)
        return -1;
    int flexible = PyObject_IsTrue(PyTuple_GET_ITEM(plan, 0));
    PyObject *steps = PyTuple_GET_ITEM(plan, 1);
    if (flexible < 0) {
        PyErr_Clear();
        return -1;
    }
    if (!PyTuple_Check(steps))
        return -1;
    for (Py_ssize_t s = 0; s < PyTuple_GET_SIZE(steps); s++) {
        PyObject *step = PyTuple_GET_ITEM(steps, s);
        if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 2)
            return -1;
        PyObject *kind = PyTuple_GET_ITEM(step, 0), *arg = PyTuple_GET_ITEM(step, 1);
        int64_t n, m, size;
        if (kind_is(kind, K_skip)) {
            if (len_int(arg, &size) < 0 || size < 0)
                return -1;
            *off += (Py_ssize_t)size;
        } else if (kind_is(kind, K_var)) {
            if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) != 2)
                return -1;
            int wide = PyObject_IsTrue(PyTuple_GET_ITEM(arg, 0)), nullable = PyObject_IsTrue(PyTuple_GET_ITEM(arg, 1));
            if (wide < 0 || nullable < 0 || len_length(b, off, flexible, wide, nullable, &n) < 0) {
                PyErr_Clear();
                return -1;
            }
            if (n > 0)
                *off += (Py_ssize_t)n;
        } else if (kind_is(kind, K_array)) {
            if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) != 3)
                return -1;
            PyObject *elem = PyTuple_GET_ITEM(arg, 0), *elem_size = PyTuple_GET_ITEM(arg, 1);
            int nullable = PyObject_IsTrue(PyTuple_GET_ITEM(arg, 2));
            if (nullable < 0 || len_length(b, off, flexible, 1, nullable, &n) < 0) {
                PyErr_Clear();
                return -1;
            }
            if (n <= 0)
                continue;  /* (as the reference: no end check after an empty or null array) */
            if (elem_size != Py_None) {
                if (len_int(elem_size, &size) < 0 || size < 0 || n * size > b->end - *off)
                    return -1;
                *off += (Py_ssize_t)(n * size);
            } else if (PyTuple_Check(elem) && PyTuple_GET_SIZE(elem) == 2 && kind_is(PyTuple_GET_ITEM(elem, 0), K_var)) {
                PyObject *var = PyTuple_GET_ITEM(elem, 1);
                if (!PyTuple_Check(var) || PyTuple_GET_SIZE(var) != 2)
                    return -1;
                int wide = PyObject_IsTrue(PyTuple_GET_ITEM(var, 0));
                int elem_nullable = PyObject_IsTrue(PyTuple_GET_ITEM(var, 1));
                if (wide < 0 || elem_nullable < 0) {
                    PyErr_Clear();
                    return -1;
                }
                for (int64_t i = 0; i < n; i++) {
                    if (len_length(b, off, flexible, wide, elem_nullable, &m) < 0)
                        return -1;
                    if (m > 0)
                        *off += (Py_ssize_t)m;
                }
            } else {
                for (int64_t i = 0; i < n; i++) {
                    if (len_walk(elem, b, off, depth + 1) < 0)
                        return -1;
                }
            }
        } else if (kind_is(kind, K_tagged_array)) {
            if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) != 2)
                return -1;
            int nullable = PyObject_IsTrue(PyTuple_GET_ITEM(arg, 1));
            if (nullable < 0 || len_int(PyTuple_GET_ITEM(arg, 0), &size) < 0 || size < 0
                || len_length(b, off, flexible, 1, nullable, &n) < 0) {
                PyErr_Clear();
                return -1;
            }
            if (n > 0) {
                if (n * (size + 1) > b->end - *off)
                    return -1;
                for (int64_t i = 0; i < n; i++) {
                    *off += (Py_ssize_t)size;
                    if (len_tags(b, off) < 0)
                        return -1;
                }
            }
        } else if (kind_is(kind, K_struct)) {
            if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) != 2)
                return -1;
            int nullable = PyObject_IsTrue(PyTuple_GET_ITEM(arg, 1));
            if (nullable < 0) {
                PyErr_Clear();
                return -1;
            }
            if (nullable) {
                if (*off >= b->end)
                    return -1;
                unsigned char marker = b->p[*off];
                *off += 1;
                if (marker == 0xFF)
                    continue;  /* (null; as the reference, no end check) */
            }
            if (len_walk(PyTuple_GET_ITEM(arg, 0), b, off, depth + 1) < 0)
                return -1;
        } else if (kind_is(kind, K_tags)) {
            if (len_tags(b, off) < 0)
                return -1;
        } else {
            return -1;
        }
        if (*off > b->end)
            return -1;
    }
    return 0;
}

static PyObject *check_lengths(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "check_lengths(plan, buf, offset) takes 3 arguments");
        return NULL;
    }
    Py_ssize_t off = PyLong_AsSsize_t(args[2]);
    if (off == -1 && PyErr_Occurred())
        return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    LenBuf b = {view.buf, view.len};
    int walked = off >= 0 && off <= view.len ? len_walk(args[0], &b, &off, 0) : -1;
    PyBuffer_Release(&view);
    if (PyErr_Occurred())
        return NULL;
    if (walked < 0)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(off);
}

/* Skips `count` partitions of a Metadata response's topic entry from c->off, as the partition
 * loop of protocol/apis/metadata.py's _Answer._walk (its reference) does: error, index, leader
 * (and its epoch from v7), the replica, in-sync (and offline from v5) node lists, tagged fields
 * from v9.  The offset after them, or -1 for anything that loop would not read the same way (a
 * count not a compact int32, a null list, a field past the end): the reference then names it. */
static Py_ssize_t md_partitions_end(Cursor *c, long count, long version)
{
    int flexible = version >= 9;
    Py_ssize_t head = version < 7 ? 10 : 14;
    int lists = version < 5 ? 2 : 3;
    for (long i = 0; i < count; i++) {
        c->off += head;
        for (int l = 0; l < lists; l++) {
            long nodes;
            if (flexible) {
                if (!uvarint32(c, &nodes))
                    return -1;
                nodes -= 1;
            } else {
                if (c->off < 0 || c->off + 4 > c->n)
                    return -1;
                nodes = be32(c->p + c->off);
                c->off += 4;
            }
            if (nodes < 0 || nodes > (c->n - c->off) / 4)
                return -1;
            c->off += 4 * (Py_ssize_t)nodes;
        }
        if (flexible && !skip_tags(c))
            return -1;
        if (c->off > c->n)
            return -1;
    }
    return c->off;
}

static PyObject *metadata_partitions_end(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer view;
    Cursor c;
    long version;
    int got = response_cursor(args, nargs, 4, "metadata_partitions_end(buf, offset, version, count)", &view, &c,
                              &version);
    if (got <= 0)
        return got < 0 ? NULL : Py_NewRef(Py_None);
    long count = PyLong_AsLong(args[3]);
    if (count == -1 && PyErr_Occurred()) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_ssize_t end = md_partitions_end(&c, count, version);
    PyBuffer_Release(&view);
    if (end < 0)
        Py_RETURN_NONE;
    return PyLong_FromSsize_t(end);
}

static PyMethodDef methods[] = {
    {"uuids_kept", uuids_kept, METH_NOARGS, "uuids_kept() -> how many topic ids' UUIDs are kept now"},
    {"check_lengths", (PyCFunction)(void (*)(void))check_lengths, METH_FASTCALL,
     "check_lengths(plan, buf, offset) -> the offset after the entity | None (bounds._walk's)"},
    {"walk_produce", (PyCFunction)(void (*)(void))walk_produce, METH_FASTCALL,
     "walk_produce(frame, offset, flexible, version) -> ProduceShape | None"},
    {"produce_sole", (PyCFunction)(void (*)(void))produce_sole, METH_FASTCALL,
     "produce_sole(frame, offset, flexible, version) -> (topic, partitions, acks, timeout_ms) | None"},
    {"produce_response_tags", (PyCFunction)(void (*)(void))produce_response_tags, METH_FASTCALL,
     "produce_response_tags(frame, offset, version) -> bool | None"},
    {"walk_fetch", (PyCFunction)(void (*)(void))walk_fetch, METH_FASTCALL,
     "walk_fetch(frame, offset, version) -> (replica id, max wait, session id, epoch, topics, forgotten) | None"},
    {"fetch_response_tags", (PyCFunction)(void (*)(void))fetch_response_tags, METH_FASTCALL,
     "fetch_response_tags(frame, offset, version) -> offset of the top-level tags | None"},
    {"metadata_partitions_end", (PyCFunction)(void (*)(void))metadata_partitions_end, METH_FASTCALL,
     "metadata_partitions_end(buf, offset, version, count) -> the offset after them | None"},
    {"request_header", (PyCFunction)(void (*)(void))request_header, METH_FASTCALL,
     "request_header(body) -> RequestHeader | None"},
    {"bind_header", (PyCFunction)(void (*)(void))bind_header, METH_FASTCALL,
     "bind_header(RequestHeader, is_flexible): what request_header builds and asks"},
    {"frame_buffer", (PyCFunction)(void (*)(void))frame_buffer, METH_FASTCALL,
     "frame_buffer(parts, size): a bytearray of size bytes starting with the parts, the rest unwritten"},
    {"bind_framing", (PyCFunction)(void (*)(void))bind_framing, METH_FASTCALL,
     "bind_framing(NEED_DATA): what FrameCursor.next_frame returns when a frame is not whole"},
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
    if (EmptyView == NULL && (EmptyView = PyMemoryView_FromMemory("", 0, PyBUF_READ)) == NULL)
        return NULL;
    if ((K_skip == NULL && (K_skip = PyUnicode_InternFromString("skip")) == NULL)
        || (K_var == NULL && (K_var = PyUnicode_InternFromString("var")) == NULL)
        || (K_array == NULL && (K_array = PyUnicode_InternFromString("array")) == NULL)
        || (K_tagged_array == NULL && (K_tagged_array = PyUnicode_InternFromString("tagged_array")) == NULL)
        || (K_struct == NULL && (K_struct = PyUnicode_InternFromString("struct")) == NULL)
        || (K_tags == NULL && (K_tags = PyUnicode_InternFromString("tags")) == NULL))
        return NULL;
    if ((S_continue == NULL && (S_continue = PyUnicode_InternFromString("_continue")) == NULL)
            || (S_check == NULL && (S_check = PyUnicode_InternFromString("_check")) == NULL)
            || (S_start_partial == NULL && (S_start_partial = PyUnicode_InternFromString("_start_partial")) == NULL)
            || (S_materialize == NULL && (S_materialize = PyUnicode_InternFromString("materialize")) == NULL))
        return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    PyObject *cursor = PyType_FromSpec(&cursor_spec);
    if (cursor == NULL || PyModule_AddObject(module, "FrameCursor", cursor) < 0) {
        Py_XDECREF(cursor);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
