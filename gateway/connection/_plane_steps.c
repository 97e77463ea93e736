/* The data plane's per-event steps in C: the byte path's loop and the handlers every request
 * goes through.  gateway/connection/plane_steps.py holds the Python references of the loop's steps
 * (serve_python, set_masks_python, receive_python, write_queue_python) and picks these where they
 * were built; the handlers' references are the DataPlane's methods of the same names
 * (gateway/connection/data_plane.py).  The suite runs both on the same cases
 * (tests/unit/gateway/test_plane_steps.py, and the data plane's tests with either set).  What a
 * request means (dispatch, authorization) stays Python: the handlers call ConnectionCore.dispatch;
 * the rarer events (EPOLLOUT, splicing, commands, ticks) stay the DataPlane's Python methods.
 *
 * complete_responses(conn, decoder) pairs the upstream's responses with the requests in flight, as
 * ConnectionCore.complete_responses_python, its reference, does (tests/unit/gateway/test_pairing.py
 * holds the two to the same outcomes): a response needing nothing but its bytes (no merge, no
 * quota; its API's rewrite_response asked, in Python, when it has one) completed here, any other
 * by conn._complete; the core calls it for both drivers, read_upstream directly.
 *
 * serve(plane, timeout_ms) polls plane._epfd (the GIL released while it waits) and serves the
 * events, turn after turn, as serve_python does: a lane's client or upstream event to
 * plane._client_event or plane._upstream_event (a plain EPOLLIN on a lane that splices nothing
 * straight to plane._read_client or plane._read_upstream), then its masks, its deferred counters
 * (lane.metrics()) and, when it is draining, plane._drained_yet; an Exception out of those steps
 * goes to plane._failed(lane, e).  It returns once the loop has something else to do: plane._stop,
 * a lane on plane._ready, a command in plane._commands, or the tick (plane._next_tick) due.
 *
 * set_masks(plane, lane) registers the lane's two descriptors on plane._epfd for what its state
 * asks, as set_masks_python does, with epoll_ctl where a mask changed.
 *
 * receive(fd, decoder, size, into_min) reads what the descriptor holds into a frame decoder, as
 * receive_python does: up to size bytes, or straight into the frame a decoder assembles in place.
 *
 * write_queue(fd, out) writes the bytes-like chunks queued in `out` (a collections.deque) to the
 * non-blocking descriptor `fd`, with writev of at most MAX_IOV chunks a call, until the queue is
 * empty or the descriptor would block.  What was written leaves the queue (a chunk written in
 * part is replaced by a memoryview of its rest); the bytes written are returned.  An error
 * other than EAGAIN raises OSError (the subclass for its errno, as os.writev would), what was
 * written by the calls before it already removed.  The GIL is released around each writev, as
 * os.writev does; the chunks' buffers are held meanwhile.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <sys/epoll.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAX_IOV 128

static int express_impl(PyObject *conn, PyObject *frame, PyObject *uout);  /* (the express dispatch) */

static PyObject *S_popleft;

/* `value` as a file descriptor: -1 with an error set (naming `who`) if it is not an int in range */
static int as_fd(PyObject *value, const char *who)
{
    long fd = PyLong_AsLong(value);
    if (fd == -1 && PyErr_Occurred())
        return -1;
    if (fd < 0 || fd > INT_MAX) {
        PyErr_Format(PyExc_ValueError, "%s: descriptor %ld out of range", who, fd);
        return -1;
    }
    return (int)fd;
}

/* Remove `written` bytes from the head of `out`, whose first chunks are `lens` long. */
static int drop_written(PyObject *out, const Py_ssize_t *lens, Py_ssize_t n, Py_ssize_t written)
{
    Py_ssize_t i = 0;
    for (; i < n && written >= lens[i]; i++) {
        PyObject *gone = PyObject_CallMethodNoArgs(out, S_popleft);
        if (gone == NULL)
            return -1;
        Py_DECREF(gone);
        written -= lens[i];
    }
    if (i == n || written == 0)
        return 0;
    PyObject *head = PySequence_GetItem(out, 0);
    if (head == NULL)
        return -1;
    PyObject *view = PyMemoryView_FromObject(head);
    Py_DECREF(head);
    if (view == NULL)
        return -1;
    PyObject *rest = PySequence_GetSlice(view, written, lens[i]);
    Py_DECREF(view);
    if (rest == NULL)
        return -1;
    int done = PySequence_SetItem(out, 0, rest);
    Py_DECREF(rest);
    return done;
}

/* write_queue's work: the bytes written, or -1 with an exception set */
static Py_ssize_t write_queue_impl(int fd, PyObject *out)
{
    Py_buffer views[MAX_IOV];
    struct iovec iov[MAX_IOV];
    Py_ssize_t lens[MAX_IOV];
    Py_ssize_t total = 0;
    for (;;) {
        Py_ssize_t n = PySequence_Size(out);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        if (n > MAX_IOV)
            n = MAX_IOV;
        Py_ssize_t held = 0;
        for (; held < n; held++) {
            PyObject *chunk = PySequence_GetItem(out, held);
            if (chunk == NULL)
                break;
            int got = PyObject_GetBuffer(chunk, &views[held], PyBUF_SIMPLE);
            Py_DECREF(chunk);  /* (the view holds its own reference) */
            if (got < 0)
                break;
            iov[held].iov_base = views[held].buf;
            iov[held].iov_len = (size_t)views[held].len;
            lens[held] = views[held].len;
        }
        if (held < n) {
            for (Py_ssize_t i = 0; i < held; i++)
                PyBuffer_Release(&views[i]);
            return -1;
        }
        ssize_t written;
        int err;
        Py_BEGIN_ALLOW_THREADS
        do {
            written = writev(fd, iov, (int)n);
        } while (written < 0 && errno == EINTR);
        err = errno;
        Py_END_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n; i++)
            PyBuffer_Release(&views[i]);
        if (written < 0) {
            if (err == EAGAIN || err == EWOULDBLOCK)
                break;
            errno = err;
            PyErr_SetFromErrno(PyExc_OSError);
            return -1;
        }
        total += written;
        if (drop_written(out, lens, n, written) < 0)
            return -1;
    }
    return total;
}

static PyObject *write_queue(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "write_queue(fd, out) takes 2 arguments");
        return NULL;
    }
    int fd = as_fd(args[0], "write_queue");
    if (fd < 0)
        return NULL;
    Py_ssize_t total = write_queue_impl(fd, args[1]);
    return total < 0 ? NULL : PyLong_FromSsize_t(total);
}

/* ---------------------------------------------------------------- masks and events */

#define MAX_EVENTS 256

/* interned attribute and method names, made once by the module's init */
static PyObject *S_closed, *S_cout, *S_uout, *S_splicing, *S_in_pipe, *S_moving, *S_capacity, *S_need,
    *S_paused, *S_conn, *S_draining, *S_held, *S_pending, *S_max_in_flight, *S_unsent, *S_max_unsent,
    *S_backlog, *S_requeue, *S_cmask, *S_umask, *S_cfd, *S_ufd, *S_epfd, *S_lanes, *S_wake,
    *S_client_event, *S_upstream_event, *S_deferred, *S_metrics, *S_drained_yet, *S_failed, *S_turns, *S_ready,
    *S_commands, *S_stop, *S_next_tick, *S_read_client, *S_read_upstream, *ONE;

/* A lane's attributes read from their slots.  Lane (gateway/connection/lane.py) keeps them in
 * __slots__: once a lane's class is seen to hold every name below in an object slot (a member
 * descriptor found on its MRO, which no instance attribute can shadow), its instances' fields
 * are read at their offsets, as the interpreter's own specialised attribute loads do; any
 * other object (a test's stand-in, a class without those slots) is asked by name. */
#define LANE_FIELDS 19
static PyObject *LANE_NAMES[LANE_FIELDS];
static PyTypeObject *lane_type;      /* the class whose offsets are known (held) */
static PyTypeObject *other_type;     /* the last class found without them (compared, not held) */
static Py_ssize_t lane_offsets[LANE_FIELDS];

static void learn_lane(PyObject *lane)
{
    PyTypeObject *type = Py_TYPE(lane);
    if (type == lane_type || type == other_type)
        return;
    Py_ssize_t offsets[LANE_FIELDS];
    for (int i = 0; i < LANE_FIELDS; i++) {
        PyObject *d = _PyType_Lookup(type, LANE_NAMES[i]);  /* borrowed; no error set */
        if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)
            || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
            other_type = type;
            return;
        }
        offsets[i] = ((PyMemberDescrObject *)d)->d_member->offset;
    }
    memcpy(lane_offsets, offsets, sizeof offsets);
    Py_INCREF(type);
    Py_XSETREF(lane_type, type);
}

/* obj.name, a new reference (NULL with an exception set) */
static PyObject *get_attr(PyObject *obj, PyObject *name)
{
    if (Py_TYPE(obj) == lane_type) {
        for (int i = 0; i < LANE_FIELDS; i++) {
            if (LANE_NAMES[i] == name) {
                PyObject *value = *(PyObject **)((char *)obj + lane_offsets[i]);
                if (value == NULL)  /* an unset slot: the interpreter says which */
                    break;
                Py_INCREF(value);
                return value;
            }
        }
    }
    return PyObject_GetAttr(obj, name);
}

/* obj.name(a, b), with what of a and b is not NULL: a new reference, or NULL with an error set */
static PyObject *call_method(PyObject *obj, PyObject *name, PyObject *a, PyObject *b)
{
    PyObject *args[3] = {obj, a, b};
    size_t n = a == NULL ? 1 : (b == NULL ? 2 : 3);
    return PyObject_VectorcallMethod(name, args, n | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

/* obj.name's truth: 1, 0, or -1 with an exception set */
static int attr_true(PyObject *obj, PyObject *name)
{
    PyObject *value = get_attr(obj, name);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* obj.name as a C long: 0 with *ok cleared, and an exception set, if it is not an int */
static long attr_long(PyObject *obj, PyObject *name, int *ok)
{
    PyObject *value = get_attr(obj, name);
    if (value == NULL) {
        *ok = 0;
        return 0;
    }
    long n = PyLong_AsLong(value);
    Py_DECREF(value);
    if (n == -1 && PyErr_Occurred())
        *ok = 0;
    return n;
}

/* len(obj.name): -1 with an exception set if it fails */
static Py_ssize_t attr_len(PyObject *obj, PyObject *name)
{
    PyObject *value = get_attr(obj, name);
    if (value == NULL)
        return -1;
    Py_ssize_t n = PyObject_Length(value);
    Py_DECREF(value);
    return n;
}

/* a.x >= b.y as Python compares them: 1, 0, or -1 with an exception set */
static int attrs_ge(PyObject *a, PyObject *x, PyObject *b, PyObject *y)
{
    PyObject *left = PyObject_GetAttr(a, x);
    if (left == NULL)
        return -1;
    PyObject *right = PyObject_GetAttr(b, y);
    if (right == NULL) {
        Py_DECREF(left);
        return -1;
    }
    int ge = PyObject_RichCompareBool(left, right, Py_GE);
    Py_DECREF(left);
    Py_DECREF(right);
    return ge;
}

/* ---------------------------------------------------------------- per-thread metrics
 * gateway/process/metrics.py's per-thread counters and histograms (configure_metrics names their
 * children's classes) keep one row of numbers per thread and label set, found through the family's
 * threading.local table.  A child of those classes whose row this thread already has is added to
 * here as its own inc or observe would; a thread's first addition, and any other object, goes
 * through its method.  Used for what every request counts: the counters a request deferred
 * (count_deferred: lane.metrics) and its response's latency (observe). */

static PyObject *LANE_CLASS, *COUNTER_CHILD, *HISTOGRAM_CHILD, *S__family, *S__local, *S_table, *S__key, *S__bounds, *S_inc,
    *S_observe;

static int call_for_effect(PyObject *obj, PyObject *name, PyObject *arg);

/* child's row for this thread (a list of `width` numbers), a new reference; NULL with no error
 * set: none yet, or not such a row */
static PyObject *thread_row(PyObject *child, Py_ssize_t width)
{
    PyObject *family = PyObject_GetAttr(child, S__family);
    PyObject *local = family == NULL ? NULL : PyObject_GetAttr(family, S__local);
    Py_XDECREF(family);
    PyObject *table = local == NULL ? NULL : PyObject_GetAttr(local, S_table);
    Py_XDECREF(local);
    if (table == NULL) {
        if (PyErr_ExceptionMatches(PyExc_AttributeError))
            PyErr_Clear();  /* (the thread's first addition makes its table) */
        return NULL;
    }
    PyObject *key = PyObject_GetAttr(child, S__key);
    PyObject *row = key == NULL || !PyDict_CheckExact(table) ? NULL : PyDict_GetItemWithError(table, key);
    Py_XINCREF(row);
    Py_XDECREF(key);
    Py_DECREF(table);
    if (row != NULL && (!PyList_CheckExact(row) || PyList_GET_SIZE(row) != width))
        Py_CLEAR(row);
    return row;
}

/* row[at] += amount: 0, or -1 with an exception set */
static int add_at(PyObject *row, Py_ssize_t at, PyObject *amount)
{
    PyObject *sum = PyNumber_Add(PyList_GET_ITEM(row, at), amount);
    if (sum == NULL)
        return -1;
    PyList_SetItem(row, at, sum);  /* (steals sum) */
    return 0;
}

/* child.observe(amount): 0, or -1 with an exception set */
static int observe_impl(PyObject *child, PyObject *amount)
{
    PyObject *bounds = NULL, *row = NULL;
    if (HISTOGRAM_CHILD != NULL && (PyObject *)Py_TYPE(child) == HISTOGRAM_CHILD) {
        bounds = PyObject_GetAttr(child, S__bounds);
        if (bounds == NULL)
            return -1;
        row = PyTuple_CheckExact(bounds) ? thread_row(child, PyTuple_GET_SIZE(bounds) + 2) : NULL;
        if (row == NULL && PyErr_Occurred()) {
            Py_DECREF(bounds);
            return -1;
        }
    }
    if (row == NULL) {
        Py_XDECREF(bounds);
        return call_for_effect(child, S_observe, amount);
    }
    int done = -1;
    Py_ssize_t lo = 0, hi = PyTuple_GET_SIZE(bounds);
    while (lo < hi) {  /* bisect_left */
        Py_ssize_t mid = (lo + hi) / 2;
        int less = PyObject_RichCompareBool(PyTuple_GET_ITEM(bounds, mid), amount, Py_LT);
        if (less < 0)
            goto out;
        if (less)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (add_at(row, lo, ONE) == 0 && add_at(row, PyList_GET_SIZE(row) - 1, amount) == 0)
        done = 0;
out:
    Py_DECREF(row);
    Py_DECREF(bounds);
    return done;
}

/* ---------------------------------------------------------------- the decision memo in C
 * authz/standard_authorizer.py's StandardDecisionMemo.allows and inc, for a memo of exactly that
 * class (configure_memo names it, with authz/metrics.py's AuthorizerMetrics, logging.Logger (whose
 * isEnabledFor audit_silent mirrors: a logger of another class is never taken as silent here) and
 * the audit logger, time.monotonic and the metrics' sample window): what they decide and
 * count, without their frames.  memo_allows answers yes only where allows() would (the action
 * remembered by its id, the authorizer's snapshot the one it was remembered in, no audit sink, the
 * audit logger known, by its own cache, not to log DEBUG; the memo then put on `later` when the
 * authorizer counts) and, for anything else, "not known here" having changed nothing (the
 * dispatcher then asks allows() itself).  memo_count adds an allowance to the listener's tally and
 * the current rate window as AuthorizerMetrics.record does under its lock, when that lock is free,
 * the tally there and the window current; otherwise inc() records it.  A memo of another class is
 * asked and counted through its methods.  tests/unit/gateway/test_express.py holds both to the
 * methods. */
static PyObject *M_MEMO, *M_METRICS, *M_LOGGER_CLASS, *M_LOGGER, *M_MONOTONIC, *M_DEBUG;
static double M_WINDOW_S;
static PyObject *S__allowed, *S__authorizer, *S__data, *S_audit_sinks, *S__metrics, *S_disabled, *S__cache,
    *S__clock, *S__lock, *S__tallies, *S__window, *S_last, *S__listener, *S_acquire, *S_release, *S_allows, *S_append;
static double monotonic_now(void);
static int memo_count(PyObject *memo);

/* whether the audit logger is known, by its level cache, not to log DEBUG (isEnabledFor(DEBUG)
 * False): 1, 0 (it logs DEBUG, or its cache does not say yet), -1 with an exception set */
static int audit_silent(void)
{
    if (M_LOGGER == NULL || (PyObject *)Py_TYPE(M_LOGGER) != M_LOGGER_CLASS)
        return 0;
    int disabled = attr_true(M_LOGGER, S_disabled);
    if (disabled != 0)
        return disabled;  /* (a disabled logger logs nothing) */
    PyObject *cache = PyObject_GetAttr(M_LOGGER, S__cache);
    if (cache == NULL)
        return -1;
    PyObject *known = PyDict_CheckExact(cache) ? PyDict_GetItemWithError(cache, M_DEBUG) : NULL;
    Py_DECREF(cache);
    return known == Py_False ? 1 : (PyErr_Occurred() ? -1 : 0);
}

/* memo.allows(action, later): 1 allowed (and counted later), 0 not known here, -1 with an
 * exception set */
static int memo_allows(PyObject *memo, PyObject *action, PyObject *later)
{
    if (M_MEMO == NULL || (PyObject *)Py_TYPE(memo) != M_MEMO) {
        PyObject *r = call_method(memo, S_allows, action, later);
        if (r == NULL)
            return -1;
        int truth = PyObject_IsTrue(r);
        Py_DECREF(r);
        return truth;
    }
    int result = -1;
    PyObject *allowed = NULL, *key = NULL, *authorizer = NULL, *data = NULL, *remembered = NULL, *sinks = NULL,
             *metrics = NULL;
    if ((allowed = PyObject_GetAttr(memo, S__allowed)) == NULL || (key = PyLong_FromVoidPtr(action)) == NULL)
        goto out;
    PyObject *held = PyDict_CheckExact(allowed) ? PyDict_GetItemWithError(allowed, key) : NULL;  /* borrowed */
    if (held != action)
        goto no;
    if ((authorizer = PyObject_GetAttr(memo, S__authorizer)) == NULL
        || (data = PyObject_GetAttr(authorizer, S__data)) == NULL
        || (remembered = PyObject_GetAttr(memo, S__data)) == NULL)
        goto out;
    if (data != remembered)
        goto no;
    if ((sinks = PyObject_GetAttr(authorizer, S_audit_sinks)) == NULL)
        goto out;
    int truth = PyObject_IsTrue(sinks);
    if (truth != 0 || (truth = audit_silent()) != 1)
        goto no;
    if ((metrics = PyObject_GetAttr(authorizer, S__metrics)) == NULL)
        goto out;
    int counted = 0;  /* (allows' own order: without `later`, counted at once) */
    if (metrics != Py_None)
        counted = later == Py_None ? memo_count(memo)
                  : (PyList_CheckExact(later) ? PyList_Append(later, memo) : call_for_effect(later, S_append, memo));
    if (counted < 0)
        goto out;
    result = 1;
    goto out;
no:
    result = PyErr_Occurred() ? -1 : 0;
out:
    Py_XDECREF(allowed); Py_XDECREF(key); Py_XDECREF(authorizer); Py_XDECREF(data); Py_XDECREF(remembered);
    Py_XDECREF(sinks); Py_XDECREF(metrics);
    return result;
}

/* lock.acquire(False) or lock.release(): 1 acquired / released, 0 not acquired, -1 error */
static int lock_call(PyObject *lock, int acquire)
{
    PyObject *r = acquire ? call_method(lock, S_acquire, Py_False, NULL) : call_method(lock, S_release, NULL, NULL);
    if (r == NULL)
        return -1;
    int truth = acquire ? PyObject_IsTrue(r) : 1;
    Py_DECREF(r);
    return truth;
}

/* memo.inc(): 0, or -1 with an exception set */
static int memo_count(PyObject *memo)
{
    int result = -1, locked = 0;
    PyObject *authorizer = NULL, *metrics = NULL, *clock = NULL, *lock = NULL, *tallies = NULL, *listener = NULL,
             *window = NULL, *last = NULL;
    if ((authorizer = PyObject_GetAttr(memo, S__authorizer)) == NULL
        || (metrics = PyObject_GetAttr(authorizer, S__metrics)) == NULL)
        goto out;
    if (metrics == Py_None) {  /* (no metrics: inc counts nothing) */
        result = 0;
        goto out;
    }
    if ((PyObject *)Py_TYPE(metrics) != M_METRICS || (clock = PyObject_GetAttr(metrics, S__clock)) == NULL
        || clock != M_MONOTONIC)
        goto by_inc;
    double now = monotonic_now();  /* (record reads its clock before it takes the lock) */
    if ((lock = PyObject_GetAttr(metrics, S__lock)) == NULL || (locked = lock_call(lock, 1)) < 0)
        goto out;
    if (!locked)  /* held by a thread recording or reading: inc() waits for it */
        goto by_inc;
    if ((tallies = PyObject_GetAttr(metrics, S__tallies)) == NULL
        || (listener = PyObject_GetAttr(memo, S__listener)) == NULL
        || (window = PyObject_GetAttr(metrics, S__window)) == NULL || (last = PyObject_GetAttr(window, S_last)) == NULL)
        goto out;
    PyObject *tally = PyDict_CheckExact(tallies) ? PyDict_GetItemWithError(tallies, listener) : NULL;  /* borrowed */
    if (tally == NULL || !PyList_CheckExact(tally) || PyList_GET_SIZE(tally) != 2 || !PyList_CheckExact(last)
        || PyList_GET_SIZE(last) != 3 || !PyFloat_CheckExact(PyList_GET_ITEM(last, 0)))
        goto by_inc;  /* the listener's first count, or not the shapes record keeps */
    if (now - PyFloat_AS_DOUBLE(PyList_GET_ITEM(last, 0)) >= M_WINDOW_S)
        goto by_inc;  /* a new window begins: record's */
    if (add_at(tally, 0, ONE) < 0 || add_at(last, 1, ONE) < 0)
        goto out;
    result = 0;
    goto out;
by_inc:
    if (PyErr_Occurred())
        goto out;
    if (locked) {
        locked = 0;
        if (lock_call(lock, 0) < 0)
            goto out;
    }
    result = call_for_effect(memo, S_inc, NULL);
out:
    if (locked && lock_call(lock, 0) < 0)
        result = -1;
    Py_XDECREF(authorizer); Py_XDECREF(metrics); Py_XDECREF(clock); Py_XDECREF(lock); Py_XDECREF(tallies);
    Py_XDECREF(listener); Py_XDECREF(window); Py_XDECREF(last);
    return result;
}

/* an object lane.deferred holds counted once: a per-thread counter child in its row, a decision
 * memo's allowance as above, anything else by its inc() */
static int count_one(PyObject *item)
{
    if (M_MEMO != NULL && (PyObject *)Py_TYPE(item) == M_MEMO)
        return memo_count(item);
    PyObject *row = COUNTER_CHILD != NULL && (PyObject *)Py_TYPE(item) == COUNTER_CHILD ? thread_row(item, 1) : NULL;
    int counted = row == NULL ? (PyErr_Occurred() ? -1 : call_for_effect(item, S_inc, NULL)) : add_at(row, 0, ONE);
    Py_XDECREF(row);
    return counted;
}

static PyObject *count(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "count(counted) takes 1 argument");
        return NULL;
    }
    if (count_one(args[0]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *memo_allows_py(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "memo_allows(memo, action, later) takes 3 arguments");
        return NULL;
    }
    int allowed = memo_allows(args[0], args[1], args[2]);
    return allowed < 0 ? NULL : PyBool_FromLong(allowed);
}

static PyObject *configure_memo(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "configure_memo(memo_class, metrics_class, logger_class, audit_logger, "
                        "monotonic, window_s) takes 6 arguments");
        return NULL;
    }
    if (!PyType_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "configure_memo: memo_class, metrics_class and logger_class are classes");
        return NULL;
    }
    double window = PyFloat_AsDouble(args[5]);
    if (window == -1.0 && PyErr_Occurred())
        return NULL;
    PyObject *debug = PyLong_FromLong(10);  /* logging.DEBUG */
    if (debug == NULL)
        return NULL;
    Py_XSETREF(M_DEBUG, debug);
    PyObject **slots[5] = {&M_MEMO, &M_METRICS, &M_LOGGER_CLASS, &M_LOGGER, &M_MONOTONIC};
    for (int i = 0; i < 5; i++)
        Py_XSETREF(*slots[i], Py_NewRef(args[i]));
    M_WINDOW_S = window;
    Py_RETURN_NONE;
}

/* lane.metrics() (Lane.metrics, its reference, for a lane of the class configure_lane named):
 * each counter in lane.deferred counted once (its inc()), then the list emptied; 0, or -1 with an
 * exception set (the list left as it was).  Any other lane's own metrics() is called. */
static int count_deferred(PyObject *lane)
{
    if (LANE_CLASS == NULL || (PyObject *)Py_TYPE(lane) != LANE_CLASS)
        return call_for_effect(lane, S_metrics, NULL);
    PyObject *deferred = get_attr(lane, S_deferred);
    if (deferred == NULL)
        return -1;
    int done = -1;
    if (!PyList_CheckExact(deferred)) {
        done = call_for_effect(lane, S_metrics, NULL);
        goto out;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(deferred); i++) {  /* (as a for loop over the list) */
        PyObject *item = Py_NewRef(PyList_GET_ITEM(deferred, i));
        int counted = count_one(item);
        Py_DECREF(item);
        if (counted < 0)
            goto out;
    }
    done = PyList_SetSlice(deferred, 0, PyList_GET_SIZE(deferred), NULL);
out:
    Py_DECREF(deferred);
    return done;
}

static PyObject *observe(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "observe(child, amount) takes 2 arguments");
        return NULL;
    }
    if (observe_impl(args[0], args[1]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *lane_metrics(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "lane_metrics(lane) takes 1 argument");
        return NULL;
    }
    if (count_deferred(args[0]) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* configure_lane, configure_decoder, configure_gateway: the one class each names, kept in *slot */
static PyObject *set_class(PyObject **slot, PyObject *const *args, Py_ssize_t nargs, const char *usage)
{
    if (nargs != 1 || !PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    Py_XSETREF(*slot, Py_NewRef(args[0]));
    Py_RETURN_NONE;
}

static PyObject *configure_lane(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return set_class(&LANE_CLASS, args, nargs, "configure_lane(lane_class) takes a class");
}

static PyObject *configure_metrics(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "configure_metrics(counter_child, histogram_child) takes two classes");
        return NULL;
    }
    Py_XSETREF(COUNTER_CHILD, Py_NewRef(args[0]));
    Py_XSETREF(HISTOGRAM_CHILD, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* Change fd's registration on epfd from mask `old` to `new` (they differ), as select.epoll's
 * register, modify and unregister do (the event's data is the descriptor). */
static int apply_mask(int epfd, int fd, long old, long new)
{
    struct epoll_event event;
    memset(&event, 0, sizeof event);
    event.events = (uint32_t)new;
    event.data.fd = fd;
    int op = new == 0 ? EPOLL_CTL_DEL : (old == 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD);
    if (epoll_ctl(epfd, op, fd, &event) < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    return 0;
}

/* Both sides' masks, computed as set_masks_python computes them (-1: an exception is set). */
static int masks_of(PyObject *plane, PyObject *lane, long *cmask_out, long *umask_out)
{
    Py_ssize_t cout = attr_len(lane, S_cout);
    if (cout < 0)
        return -1;
    Py_ssize_t uout = attr_len(lane, S_uout);
    if (uout < 0)
        return -1;
    PyObject *sp = get_attr(lane, S_splicing);
    if (sp == NULL)
        return -1;
    long cmask, umask;
    int ok = 1;
    if (sp != Py_None) {  /* (never paused: nothing is dispatched meanwhile) */
        long in_pipe = attr_long(sp, S_in_pipe, &ok);
        long moving = ok ? attr_long(sp, S_moving, &ok) : 0;
        long capacity = ok ? attr_long(sp, S_capacity, &ok) : 0;
        int waits = cout > 0 || in_pipe != 0;
        int need = 0;
        if (ok && !(moving && in_pipe < capacity) && !waits) {
            need = attr_true(sp, S_need);
            if (need < 0)
                ok = 0;
        }
        Py_DECREF(sp);
        if (!ok)
            return -1;
        umask = ((moving && in_pipe < capacity) || (need && !waits)) ? EPOLLIN : 0;
        if (uout)
            umask |= EPOLLOUT;
        cmask = waits ? EPOLLOUT : 0;
    } else {
        Py_DECREF(sp);
        int paused = attr_true(lane, S_paused);
        if (paused < 0)
            return -1;
        if (paused) {
            cmask = umask = 0;
        } else {
            PyObject *conn = get_attr(lane, S_conn);
            if (conn == NULL)
                return -1;
            int stop = uout > 0;  /* it takes no request now: evaluated in set_masks_python's order */
            if (!stop)
                stop = attr_true(lane, S_draining);
            if (stop == 0) {
                PyObject *held = get_attr(lane, S_held);
                if (held == NULL)
                    stop = -1;
                else {
                    stop = held != Py_None;
                    Py_DECREF(held);
                }
            }
            if (stop == 0) {
                Py_ssize_t pending = attr_len(conn, S_pending);
                if (pending < 0)
                    stop = -1;
                else {
                    PyObject *n = PyLong_FromSsize_t(pending), *limit = PyObject_GetAttr(conn, S_max_in_flight);
                    stop = (n == NULL || limit == NULL) ? -1 : PyObject_RichCompareBool(n, limit, Py_GE);
                    Py_XDECREF(n);
                    Py_XDECREF(limit);
                }
            }
            if (stop == 0)
                stop = attrs_ge(conn, S_unsent, conn, S_max_unsent);
            Py_DECREF(conn);
            if (stop < 0)
                return -1;
            if (stop) {
                cmask = 0;
            } else {
                int backlog = attr_true(lane, S_backlog);
                if (backlog < 0)
                    return -1;
                if (backlog) {  /* frames still buffered: served from the ready list, not the socket */
                    cmask = 0;
                    PyObject *r = call_method(plane, S_requeue, lane, NULL);
                    if (r == NULL)
                        return -1;
                    Py_DECREF(r);
                } else {
                    cmask = EPOLLIN;
                }
            }
            if (cout) {
                cmask |= EPOLLOUT;
                umask = uout ? EPOLLOUT : 0;
            } else {
                umask = uout ? (EPOLLIN | EPOLLOUT) : EPOLLIN;
            }
        }
    }
    *cmask_out = cmask;
    *umask_out = umask;
    return 0;
}

/* Apply one side's mask where it changed and remember it on the lane. */
static int update_side(PyObject *lane, int epfd, PyObject *fd_name, PyObject *mask_name, long mask)
{
    int ok = 1;
    long old = attr_long(lane, mask_name, &ok);
    if (!ok)
        return -1;
    if (mask == old)  /* (after most events neither mask changes) */
        return 0;
    long fd = attr_long(lane, fd_name, &ok);
    if (!ok)
        return -1;
    if (apply_mask(epfd, (int)fd, old, mask) < 0)
        return -1;
    PyObject *value = PyLong_FromLong(mask);
    if (value == NULL)
        return -1;
    int set = PyObject_SetAttr(lane, mask_name, value);
    Py_DECREF(value);
    return set;
}

static int set_masks_impl(PyObject *plane, PyObject *lane, int epfd)
{
    int closed = attr_true(lane, S_closed);
    if (closed)
        return closed < 0 ? -1 : 0;
    long cmask, umask;
    if (masks_of(plane, lane, &cmask, &umask) < 0)
        return -1;
    if (update_side(lane, epfd, S_cfd, S_cmask, cmask) < 0)
        return -1;
    return update_side(lane, epfd, S_ufd, S_umask, umask);
}

static int plane_epfd(PyObject *plane)
{
    PyObject *value = PyObject_GetAttr(plane, S_epfd);
    if (value == NULL)
        return -1;
    int fd = as_fd(value, "the data plane's epoll");
    Py_DECREF(value);
    return fd;
}

static PyObject *set_masks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_masks(plane, lane) takes 2 arguments");
        return NULL;
    }
    int epfd = plane_epfd(args[0]);
    learn_lane(args[1]);
    if (epfd < 0 || set_masks_impl(args[0], args[1], epfd) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* One lane's event after its handler: masks, deferred counters, a draining lane's end. */
static int after_event(PyObject *plane, PyObject *lane, int epfd)
{
    if (set_masks_impl(plane, lane, epfd) < 0)
        return -1;
    int deferred = attr_true(lane, S_deferred);
    if (deferred < 0)
        return -1;
    if (deferred && count_deferred(lane) < 0)  /* after the upstream writes: off the request's latency */
        return -1;
    int draining = attr_true(lane, S_draining);
    if (draining < 0)
        return -1;
    if (draining) {
        PyObject *r = call_method(plane, S_drained_yet, lane, NULL);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
    return 0;
}

/* The exception a lane's steps raised: an Exception goes to plane._failed(lane, e) (0, or -1 if
 * that raised); anything else (KeyboardInterrupt, SystemExit) is restored for the caller (-1). */
static int lane_failed(PyObject *plane, PyObject *lane)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (type == NULL || !PyErr_GivenExceptionMatches(type, PyExc_Exception)) {
        PyErr_Restore(type, value, tb);
        return -1;
    }
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *r = call_method(plane, S_failed, lane, value);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* A lane's event to its handler, as serve_python's _handle_event: a plain EPOLLIN on a lane
 * that splices nothing to the read that handler would make (when that side is polled for it
 * and, upstream, the lane is open); any other event to plane._client_event or
 * plane._upstream_event.  The handler's result, or NULL with an error set. */
static PyObject *handle_event(PyObject *plane, PyObject *lane, int fd, uint32_t events)
{
    int ok = 1;
    long cfd = attr_long(lane, S_cfd, &ok);
    if (!ok)
        return NULL;
    int client = cfd == fd;
    if (events == EPOLLIN) {
        PyObject *sp = get_attr(lane, S_splicing);
        if (sp == NULL)
            return NULL;
        int plain = sp == Py_None;
        Py_DECREF(sp);
        if (plain) {
            long mask = attr_long(lane, client ? S_cmask : S_umask, &ok);
            if (!ok)
                return NULL;
            if (!(mask & EPOLLIN))
                Py_RETURN_NONE;
            if (!client) {
                int closed = attr_true(lane, S_closed);
                if (closed)
                    return closed < 0 ? NULL : Py_NewRef(Py_None);
            }
            return call_method(plane, client ? S_read_client : S_read_upstream, lane, NULL);
        }
    }
    PyObject *ev = PyLong_FromUnsignedLong(events);
    if (ev == NULL)
        return NULL;
    PyObject *r = call_method(plane, client ? S_client_event : S_upstream_event, lane, ev);
    Py_DECREF(ev);
    return r;
}

/* One poll of epfd and the events it returned (serve_python's _serve_events): the events
 * polled, or -1 with an exception set. */
static int serve_events(PyObject *plane, PyObject *lanes, int epfd, long wake, int timeout)
{
    struct epoll_event events[MAX_EVENTS];
    int n, err;
    Py_BEGIN_ALLOW_THREADS
    n = epoll_wait(epfd, events, MAX_EVENTS, timeout);
    err = errno;
    Py_END_ALLOW_THREADS
    if (n < 0) {
        if (err == EINTR)  /* (a signal: the loop polls again, as the reference does) */
            return 0;
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        int fd = events[i].data.fd;
        PyObject *key = PyLong_FromLong(fd);
        if (key == NULL)
            return -1;
        PyObject *lane = PyDict_GetItemWithError(lanes, key);  /* borrowed */
        Py_DECREF(key);
        if (lane == NULL) {
            if (PyErr_Occurred())
                return -1;
            if (fd == wake) {
                uint64_t count;
                ssize_t got = read(fd, &count, sizeof count);  /* (EAGAIN: already emptied) */
                (void)got;
            }
            continue;
        }
        Py_INCREF(lane);  /* (its handler may end it, and drop the lanes' reference) */
        learn_lane(lane);
        int paused = attr_true(lane, S_paused);
        if (paused) {
            Py_DECREF(lane);
            if (paused < 0)
                return -1;
            continue;
        }
        int done = -1;
        PyObject *r = handle_event(plane, lane, fd, events[i].events);
        if (r != NULL) {
            Py_DECREF(r);
            done = after_event(plane, lane, epfd);
        }
        if (done < 0 && lane_failed(plane, lane) < 0) {
            Py_DECREF(lane);
            return -1;
        }
        Py_DECREF(lane);
    }
    return n;
}

static double monotonic_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  /* (time.monotonic's clock) */
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* plane.turns += 1 */
static int count_turn(PyObject *plane)
{
    PyObject *turns = PyObject_GetAttr(plane, S_turns);
    if (turns == NULL)
        return -1;
    PyObject *more = PyNumber_Add(turns, ONE);
    Py_DECREF(turns);
    if (more == NULL)
        return -1;
    int set = PyObject_SetAttr(plane, S_turns, more);
    Py_DECREF(more);
    return set;
}

static PyObject *serve(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "serve(plane, timeout_ms) takes 2 arguments");
        return NULL;
    }
    PyObject *plane = args[0];
    long timeout = PyLong_AsLong(args[1]);
    if (timeout == -1 && PyErr_Occurred())
        return NULL;
    if (timeout < -1 || timeout > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "serve: timeout_ms out of range");
        return NULL;
    }
    int epfd = plane_epfd(plane);
    if (epfd < 0)
        return NULL;
    int ok = 1;
    long wake = attr_long(plane, S_wake, &ok);
    if (!ok)
        return NULL;
    PyObject *lanes = PyObject_GetAttr(plane, S_lanes);
    PyObject *ready = lanes == NULL ? NULL : PyObject_GetAttr(plane, S_ready);
    PyObject *commands = ready == NULL ? NULL : PyObject_GetAttr(plane, S_commands);
    PyObject *result = NULL;
    if (commands == NULL)
        goto done;
    if (!PyDict_Check(lanes)) {
        PyErr_SetString(PyExc_TypeError, "serve: plane._lanes is not a dict");
        goto done;
    }
    long served = 0;
    for (;;) {
        if (count_turn(plane) < 0)
            goto done;
        int n = serve_events(plane, lanes, epfd, wake, (int)timeout);
        if (n < 0)
            goto done;
        served += n;
        int stop = attr_true(plane, S_stop);
        if (stop < 0)
            goto done;
        Py_ssize_t waiting = stop ? 0 : PyObject_Length(ready);
        if (waiting < 0)
            goto done;
        if (!stop && waiting == 0) {
            waiting = PyObject_Length(commands);
            if (waiting < 0)
                goto done;
        }
        if (stop || waiting)
            break;
        if (PyDict_GET_SIZE(lanes)) {
            PyObject *tick = PyObject_GetAttr(plane, S_next_tick);
            if (tick == NULL)
                goto done;
            double at = PyFloat_AsDouble(tick);
            Py_DECREF(tick);
            if (at == -1.0 && PyErr_Occurred())
                goto done;
            double wait = (at - monotonic_now()) * 1000.0;
            if (wait <= 0)
                break;
            timeout = wait >= (double)INT_MAX ? INT_MAX : (long)wait;
            if ((double)timeout < wait)
                timeout++;  /* (rounded up, as math.ceil) */
        } else {
            timeout = -1;
        }
    }
    result = PyLong_FromLong(served);
done:
    Py_XDECREF(lanes);
    Py_XDECREF(ready);
    Py_XDECREF(commands);
    return result;
}

/* ---------------------------------------------------------------- reads */

static PyObject *S_trusted, *S__buffer, *S_partial_space, *S_partial_filled, *S_receive_data, *S__size, *S__fill;
/* protocol/framing.py's FrameDecoder (configure_decoder): its to_come and the first test of its
 * partial_space read here from its fields, without their frames */
static PyObject *DECODER_CLASS;

static PyObject *configure_decoder(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return set_class(&DECODER_CLASS, args, nargs, "configure_decoder(frame_decoder) takes a class");
}

/* errno values os.read raises a ConnectionError for: the peer is gone (0: end of stream) */
static int connection_error(int err)
{
    return err == EPIPE || err == ESHUTDOWN || err == ECONNABORTED || err == ECONNREFUSED || err == ECONNRESET;
}

/* read(2) with the GIL released, retried on EINTR; errno kept */
static ssize_t read_released(int fd, void *buf, size_t size, int *err)
{
    ssize_t n;
    Py_BEGIN_ALLOW_THREADS
    do {
        n = read(fd, buf, size);
    } while (n < 0 && errno == EINTR);
    *err = errno;
    Py_END_ALLOW_THREADS
    return n;
}

/* What a failed read comes to: -1 (nothing there), 0 (the peer is gone), or -2 (raised). */
static Py_ssize_t read_failed(int err)
{
    if (err == EAGAIN || err == EWOULDBLOCK)
        return -1;
    if (connection_error(err))
        return 0;
    errno = err;
    PyErr_SetFromErrno(PyExc_OSError);
    return -2;
}

/* receive's work: the bytes read, 0 at end of stream, -1 if none, -2 with an exception set */
static Py_ssize_t receive_impl(int fd, PyObject *decoder, Py_ssize_t size, Py_ssize_t into_min)
{
    int err;
    int in_place = attr_true(decoder, S_trusted);
    if (in_place == 0 || (in_place > 0 && DECODER_CLASS != NULL && (PyObject *)Py_TYPE(decoder) == DECODER_CLASS)) {
        /* a client's decoder has a frame to read into only once that frame is nearly whole; a
         * trusted FrameDecoder (partial_space's own first test) none while it defers nothing and
         * assembles nothing in place */
        int deferred = in_place > 0 ? attr_true(decoder, S_deferred) : 0;
        if (deferred < 0)
            return -2;
        if (!deferred) {
            PyObject *buffer = PyObject_GetAttr(decoder, S__buffer);
            if (buffer == NULL)
                return -2;
            in_place = buffer != Py_None;
            Py_DECREF(buffer);
        }
    }
    if (in_place < 0)
        return -2;
    if (in_place) {
        PyObject *space = PyObject_CallMethodNoArgs(decoder, S_partial_space);
        if (space == NULL)
            return -2;
        if (space != Py_None) {
            Py_buffer view;
            if (PyObject_GetBuffer(space, &view, PyBUF_WRITABLE) < 0) {
                Py_DECREF(space);
                return -2;
            }
            if (view.len >= into_min) {
                ssize_t n = read_released(fd, view.buf, (size_t)view.len, &err);
                PyBuffer_Release(&view);
                Py_DECREF(space);
                if (n <= 0)
                    return n < 0 ? read_failed(err) : 0;
                PyObject *got = PyLong_FromSsize_t(n);
                if (got == NULL)
                    return -2;
                PyObject *r = PyObject_CallMethodOneArg(decoder, S_partial_filled, got);
                Py_DECREF(got);
                if (r == NULL)
                    return -2;
                Py_DECREF(r);
                return n;
            }
            PyBuffer_Release(&view);
        }
        Py_DECREF(space);
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, size);
    if (data == NULL)
        return -2;
    ssize_t n = read_released(fd, PyBytes_AS_STRING(data), (size_t)size, &err);
    if (n <= 0) {
        Py_DECREF(data);
        return n < 0 ? read_failed(err) : 0;
    }
    if (n != size && _PyBytes_Resize(&data, n) < 0)
        return -2;
    PyObject *r = PyObject_CallMethodOneArg(decoder, S_receive_data, data);
    Py_DECREF(data);
    if (r == NULL)
        return -2;
    Py_DECREF(r);
    return n;
}

static PyObject *receive(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "receive(fd, decoder, size, into_min) takes 4 arguments");
        return NULL;
    }
    int fd = as_fd(args[0], "receive");
    if (fd < 0)
        return NULL;
    Py_ssize_t size = PyLong_AsSsize_t(args[2]);
    if (size == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t into_min = PyLong_AsSsize_t(args[3]);
    if (into_min == -1 && PyErr_Occurred())
        return NULL;
    if (size <= 0) {
        PyErr_SetString(PyExc_ValueError, "receive: size must be positive");
        return NULL;
    }
    Py_ssize_t n = receive_impl(fd, args[1], size, into_min);
    return n < -1 ? NULL : PyLong_FromSsize_t(n);
}

/* ---------------------------------------------------------------- handlers
 *
 * read_client(plane, lane), process_client(plane, lane), read_upstream(plane, lane) and
 * flush_client(plane, lane) do what the DataPlane's _read_client, _process_client, _read_upstream
 * and _flush_client do, step for step: the DataPlane binds them over those methods when it is
 * built (where this module was), so serve, the ready list and the Python methods that call them
 * reach these.  They raise what the methods raise (CloseConnection; the client gone), for serve
 * to end the lane with.
 */

/* What the handlers and the pairing take from gateway/connection/core.py, given once by
 * configure_core() when it is imported: the decoder's NEED_DATA and FrameError, CloseConnection
 * (made with (reason, metric)) and CodecError; and from gateway/connection/data_plane.py, given by
 * configure(): NeedThrottle, the maker of a failed write's error (lane, fd, OSError), and the sizes
 * the reads and the quantum use. */
static PyObject *NEED_DATA, *FRAME_ERROR, *CLOSE_ERROR, *CODEC_ERROR, *NEED_THROTTLE, *WRITE_FAILED;
static Py_ssize_t QUANTUM, RECV, RECV_FRAME, RECV_INTO_MIN, HEAD;
static PyObject *S_cdec, *S_udec, *S_n_in, *S_n_out, *S_post, *S_to_come, *S_in_frame, *S_buffered, *S_next_frame,
    *S_dispatch, *S_data, *S_last_read, *S_in_flight, *S_spec, *S_stream_response, *S_defer_from,
    *S_heavy, *S_end, *S_open_splicing, *S_eof, *S_await, *MSG_HEAVY, *S_upstream,
    *S_upstream_closed, *S_frame;

/* obj.name = value (a lane's slot written in place, as the interpreter's member descriptor would) */
static int set_field(PyObject *obj, PyObject *name, PyObject *value)
{
    if (Py_TYPE(obj) == lane_type) {
        for (int i = 0; i < LANE_FIELDS; i++) {
            if (LANE_NAMES[i] == name) {
                PyObject **slot = (PyObject **)((char *)obj + lane_offsets[i]);
                PyObject *old = *slot;
                *slot = Py_NewRef(value);
                Py_XDECREF(old);
                return 0;
            }
        }
    }
    return PyObject_SetAttr(obj, name, value);
}

/* obj.name += n */
static int add_to(PyObject *obj, PyObject *name, Py_ssize_t n)
{
    PyObject *value = get_attr(obj, name);
    if (value == NULL)
        return -1;
    PyObject *step = PyLong_FromSsize_t(n);
    PyObject *sum = step == NULL ? NULL : PyNumber_Add(value, step);
    Py_DECREF(value);
    Py_XDECREF(step);
    if (sum == NULL)
        return -1;
    int set = set_field(obj, name, sum);
    Py_DECREF(sum);
    return set;
}

/* obj.name as a Py_ssize_t: -1 with an exception set if it is not an int in range */
static Py_ssize_t attr_size(PyObject *obj, PyObject *name)
{
    PyObject *value = get_attr(obj, name);
    if (value == NULL)
        return -1;
    Py_ssize_t n = PyLong_AsSsize_t(value);
    Py_DECREF(value);
    return n;
}

/* obj.name(arg) called for its effect: 0, or -1 with an exception set */
static int call_for_effect(PyObject *obj, PyObject *name, PyObject *arg)
{
    PyObject *r = call_method(obj, name, arg, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* raise `made`, a new reference to an exception (NULL: making it failed, its error is set): -1 */
static int raise_made(PyObject *made)
{
    if (made != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(made), made);
        Py_DECREF(made);
    }
    return -1;
}

/* The exception being raised, taken from the thread's error state (a new reference) */
static PyObject *take_error(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
}

/* raise CLOSE_ERROR(reason, metric): always -1 */
static int raise_close(PyObject *reason, PyObject *metric)
{
    return raise_made(PyObject_CallFunctionObjArgs(CLOSE_ERROR, reason, metric, NULL));
}

/* DataPlane._write: out's chunks to fd until done or it would block (to the client: counted as
 * sent, and no longer unsent); a failed write raises what WRITE_FAILED(lane, fd, error) makes. */
static int write_out(PyObject *lane, int fd, PyObject *out, int to_client)
{
    Py_ssize_t sent = write_queue_impl(fd, out);
    if (sent < 0) {
        if (PyErr_ExceptionMatches(PyExc_OSError)) {
            PyObject *error = take_error();
            PyObject *fd_obj = PyLong_FromLong(fd);
            raise_made(fd_obj == NULL ? NULL : PyObject_CallFunctionObjArgs(WRITE_FAILED, lane, fd_obj, error, NULL));
            Py_XDECREF(fd_obj);
            Py_XDECREF(error);
        }
        return -1;
    }
    if (to_client && sent) {
        if (add_to(lane, S_n_out, sent) < 0)
            return -1;
        PyObject *conn = get_attr(lane, S_conn);
        if (conn == NULL)
            return -1;
        int done = add_to(conn, S_unsent, -sent);
        Py_DECREF(conn);
        return done;
    }
    return 0;
}

/* One side's queue written: the lane's field `fd_name`'s descriptor */
static int write_side(PyObject *lane, PyObject *fd_name, PyObject *out, int to_client)
{
    int ok = 1;
    long fd = attr_long(lane, fd_name, &ok);
    if (!ok)
        return -1;
    return write_out(lane, (int)fd, out, to_client);
}

/* DataPlane._flush_client: completed responses from the head of conn.pending to the client, in order */
static int flush_client_impl(PyObject *lane)
{
    PyObject *conn = get_attr(lane, S_conn);
    if (conn == NULL)
        return -1;
    PyObject *pending = PyObject_GetAttr(conn, S_pending);
    Py_DECREF(conn);
    if (pending == NULL)
        return -1;
    PyObject *cout = get_attr(lane, S_cout);
    int done = -1;
    if (cout == NULL)
        goto out;
    for (;;) {
        Py_ssize_t n = PyObject_Length(pending);
        if (n < 0)
            goto out;
        if (n == 0)
            break;
        PyObject *head = PySequence_GetItem(pending, 0);
        if (head == NULL)
            goto out;
        PyObject *data = PyObject_GetAttr(head, S_data);
        Py_DECREF(head);
        if (data == NULL)
            goto out;
        if (data == Py_None) {
            Py_DECREF(data);
            break;
        }
        PyObject *gone = PyObject_CallMethodNoArgs(pending, S_popleft);
        Py_XDECREF(gone);
        int added = gone == NULL ? -1 : call_for_effect(cout, S_append, data);
        Py_DECREF(data);
        if (added < 0)
            goto out;
    }
    Py_ssize_t queued = PyObject_Length(cout);
    if (queued < 0)
        goto out;
    if (queued) {
        int closed = attr_true(lane, S_closed);
        if (closed < 0 || (!closed && write_side(lane, S_cfd, cout, 1) < 0))
            goto out;
    }
    done = 0;
out:
    Py_DECREF(pending);
    Py_XDECREF(cout);
    return done;
}

/* The frames process_client takes from the client decoder, in the turns of its loop */
static int process_frames(PyObject *plane, PyObject *lane, PyObject *conn, PyObject *dec, PyObject *uout)
{
    PyObject *pending = PyObject_GetAttr(conn, S_pending);
    if (pending == NULL)
        return -1;
    int done = -1;
    Py_ssize_t limit = attr_size(conn, S_max_in_flight);
    if (limit == -1 && PyErr_Occurred())
        goto out;
    Py_ssize_t budget = QUANTUM;
    for (;;) {
        int answered = 0, need_data = 0;
        for (;;) {
            Py_ssize_t in_flight = PyObject_Length(pending);
            if (in_flight < 0)
                goto out;
            if (in_flight >= limit)
                break;
            int muted = attrs_ge(conn, S_unsent, conn, S_max_unsent);  /* (conn.muted) */
            if (muted < 0)
                goto out;
            if (muted)
                break;
            if (!budget) {  /* its next frames wait for the other lanes' turn */
                if (call_for_effect(plane, S_requeue, lane) < 0)
                    goto out;
                break;
            }
            PyObject *frame = PyObject_CallMethodNoArgs(dec, S_next_frame);
            if (frame == NULL) {
                if (PyErr_ExceptionMatches(FRAME_ERROR)) {
                    PyObject *error = take_error();
                    PyObject *reason = PyObject_Str(error);
                    Py_XDECREF(error);
                    if (reason != NULL) {
                        raise_close(reason, S_frame);
                        Py_DECREF(reason);
                    }
                }
                goto out;
            }
            if (frame == NEED_DATA) {
                Py_DECREF(frame);
                if (set_field(lane, S_backlog, Py_False) < 0)
                    goto out;
                need_data = 1;
                break;
            }
            if (set_field(lane, S_backlog, Py_True) < 0) {
                Py_DECREF(frame);
                goto out;
            }
            budget--;
            int express = express_impl(conn, frame, uout);  /* the usual Produce, or the reference's dispatch */
            PyObject *outcome = express < 0 ? NULL : (express ? Py_NewRef(Py_False) : call_method(conn, S_dispatch, frame, uout));
            Py_DECREF(frame);
            if (outcome == NULL)
                goto out;
            if (outcome == Py_False) {  /* forwarded (the usual outcome) */
                Py_DECREF(outcome);
                Py_ssize_t buffered = attr_size(dec, S_buffered);
                if (buffered < 0)
                    goto out;
                if (!buffered) {  /* nothing more was read: no frame to look for */
                    if (set_field(lane, S_backlog, Py_False) < 0)
                        goto out;
                    need_data = 1;
                    break;
                }
                continue;
            }
            if (outcome == Py_True) {
                Py_DECREF(outcome);
                answered = 1;
                continue;
            }
            int stepped;
            if ((PyObject *)Py_TYPE(outcome) == NEED_THROTTLE) {  /* over a quota: held, the answers still read */
                stepped = set_field(lane, S_held, outcome);
            } else {  /* an Await: performed on the connection's Trio task */
                stepped = set_field(lane, S_paused, Py_True);
                PyObject *message = stepped < 0 ? NULL : PyTuple_Pack(2, S_await, outcome);
                stepped = message == NULL ? -1 : call_for_effect(lane, S_post, message);
                Py_XDECREF(message);
            }
            Py_DECREF(outcome);
            if (stepped < 0)
                goto out;
            break;
        }
        Py_ssize_t queued = PyObject_Length(uout);
        if (queued < 0)
            goto out;
        if (queued && write_side(lane, S_ufd, uout, 0) < 0)  /* (before an awaited one: the requests ahead of it) */
            goto out;
        if (!answered)
            break;
        if (count_deferred(lane) < 0  /* counted before the client can see the answers */
            || flush_client_impl(lane) < 0)  /* local answers free their slots at once ... */
            goto out;
        if (need_data || !budget)
            break;
        int stop = attr_true(lane, S_paused);
        if (stop == 0)
            stop = attr_true(lane, S_closed);
        if (stop == 0) {
            queued = PyObject_Length(uout);
            stop = queued < 0 ? -1 : queued > 0;
        }
        if (stop == 0) {
            Py_ssize_t in_flight = PyObject_Length(pending);
            stop = in_flight < 0 ? -1 : in_flight >= limit;
        }
        if (stop == 0)
            stop = attrs_ge(conn, S_unsent, conn, S_max_unsent);
        if (stop < 0)
            goto out;
        if (stop)
            break;  /* ... so frames held back by max_in_flight may go on */
    }
    done = 0;
out:
    Py_DECREF(pending);
    return done;
}

/* DataPlane._process_client: what waits for the upstream written, then the client's buffered
 * frames dispatched and written, until the decoder needs data, max_in_flight is reached, the
 * quantum is spent or a request must await */
static int process_client_impl(PyObject *plane, PyObject *lane)
{
    int stop = attr_true(lane, S_closed);
    if (stop == 0)
        stop = attr_true(lane, S_paused);
    if (stop)
        return stop < 0 ? -1 : 0;
    PyObject *uout = get_attr(lane, S_uout);
    if (uout == NULL)
        return -1;
    PyObject *conn = NULL, *dec = NULL;
    int done = -1;
    Py_ssize_t queued = PyObject_Length(uout);
    if (queued < 0)
        goto out;
    if (queued) {
        if (write_side(lane, S_ufd, uout, 0) < 0)
            goto out;
        queued = PyObject_Length(uout);
        if (queued) {  /* the upstream is not taking more now: EPOLLOUT resumes us */
            done = queued < 0 ? -1 : 0;
            goto out;
        }
    }
    /* no new request while the gateway stops, the client waits out a throttle or a response is spliced */
    stop = attr_true(lane, S_draining);
    if (stop == 0) {
        PyObject *held = get_attr(lane, S_held);
        stop = held == NULL ? -1 : held != Py_None;
        Py_XDECREF(held);
    }
    if (stop == 0) {
        PyObject *sp = get_attr(lane, S_splicing);
        stop = sp == NULL ? -1 : sp != Py_None;
        Py_XDECREF(sp);
    }
    if (stop) {
        done = stop < 0 ? -1 : 0;
        goto out;
    }
    conn = get_attr(lane, S_conn);
    dec = conn == NULL ? NULL : get_attr(lane, S_cdec);
    if (dec != NULL)
        done = process_frames(plane, lane, conn, dec, uout);
out:
    Py_DECREF(uout);
    Py_XDECREF(conn);
    Py_XDECREF(dec);
    return done;
}

/* DataPlane._read_client: a read of the client (the rest of a large request in reads of up to
 * RECV_FRAME), then its frames processed; the end of its stream ends the lane ("eof") */
/* decoder.to_come (a FrameDecoder's from its fields: _size - _fill while a frame's size is known),
 * or -1 with an exception set */
static Py_ssize_t decoder_to_come(PyObject *dec)
{
    if (DECODER_CLASS == NULL || (PyObject *)Py_TYPE(dec) != DECODER_CLASS)
        return attr_size(dec, S_to_come);
    Py_ssize_t size = attr_size(dec, S__size);
    if (size <= 0)
        return size;  /* (0: no frame's size known yet; -1: the error) */
    Py_ssize_t fill = attr_size(dec, S__fill);
    return fill < 0 ? -1 : size - fill;
}

static int read_client_impl(PyObject *plane, PyObject *lane)
{
    PyObject *dec = get_attr(lane, S_cdec);
    if (dec == NULL)
        return -1;
    int done = -1;
    int ok = 1;
    Py_ssize_t to_come = decoder_to_come(dec);
    long fd = to_come < 0 ? 0 : attr_long(lane, S_cfd, &ok);
    if (to_come < 0 || !ok)
        goto out;
    Py_ssize_t size = to_come <= RECV ? RECV : (to_come < RECV_FRAME ? to_come : RECV_FRAME);
    Py_ssize_t n = receive_impl((int)fd, dec, size, RECV_INTO_MIN);
    if (n < -1)
        goto out;
    if (n == 0) {
        int in_frame = attr_true(dec, S_in_frame);
        if (in_frame < 0)
            goto out;
        Py_ssize_t left = in_frame ? attr_size(dec, S_buffered) : 0;
        if (left < 0)
            goto out;
        PyObject *count = PyLong_FromSsize_t(left);
        PyObject *message = count == NULL ? NULL : PyTuple_Pack(2, S_eof, count);
        Py_XDECREF(count);
        if (message == NULL)
            goto out;
        PyObject *r = call_method(plane, S_end, lane, message);
        Py_DECREF(message);
        if (r == NULL)
            goto out;
        Py_DECREF(r);
    } else if (n > 0) {
        if (add_to(lane, S_n_in, n) < 0)
            goto out;
        PyObject *conn = get_attr(lane, S_conn);
        if (conn == NULL)
            goto out;
        PyObject *now = PyFloat_FromDouble(monotonic_now());
        int set = now == NULL ? -1 : PyObject_SetAttr(conn, S_last_read, now);
        Py_XDECREF(now);
        Py_DECREF(conn);
        if (set < 0 || process_client_impl(plane, lane) < 0)
            goto out;
    }
    done = 0;
out:
    Py_DECREF(dec);
    return done;
}

/* ---------------------------------------------------------------- pairing
 * ConnectionCore.complete_responses (complete_responses_python, its reference): every whole
 * upstream response paired with the oldest request in flight.  A response that needs nothing but
 * its bytes checked and passed on (no merge, no quota, a response header without tagged fields;
 * the API's rewrite_response, if any, asked and answering None, or a new body, unless its
 * response_tags found nothing it could rewrite) is completed here;
 * any other by conn._complete, the reference for every case. */

static PyObject *S__complete, *S_large, *S_merge, *S_quota, *S_header, *S_correlation_id, *S_rewrite_response,
    *S_api_key, *S_api_version, *S_flexible, *S_latency, *S_listener_name, *S_name, *S_sent_at,
    *S_listener, *S_node_map, *S__offload_response, *S__cluster, *S_timing_out_since, *S_answered,
    *S__check_correlation, *S_nobody_asked, *S_bad_frame, *S__latency, *S_response_tags;

/* metrics.latency(listener, name): the child GatewayMetrics keeps in its _latency dict when it is
 * there (what the method returns), else the method's (a new reference; NULL: an error is set) */
static PyObject *latency_child(PyObject *metrics, PyObject *listener, PyObject *name)
{
    PyObject *cache = PyObject_GetAttr(metrics, S__latency);
    if (cache == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
    } else {
        PyObject *child = NULL;
        if (PyDict_CheckExact(cache)) {
            PyObject *key = PyTuple_Pack(2, listener, name);
            if (key == NULL) {
                Py_DECREF(cache);
                return NULL;
            }
            child = PyDict_GetItemWithError(cache, key);
            Py_DECREF(key);
            Py_XINCREF(child);
        }
        Py_DECREF(cache);
        if (child != NULL || PyErr_Occurred())
            return child;
    }
    return call_method(metrics, S_latency, listener, name);
}

/* Whether spec.rewrite_response need not be asked about a flexible response: its API's
 * response_tags(frame, offset, version) said False (no top-level tagged field, so the rewrite
 * would answer None).  1, 0 (ask it), or -1 with an error set. */
static int rewrite_needless(PyObject *spec, PyObject *frame, PyObject *at, PyObject *version)
{
    PyObject *tags = PyObject_GetAttr(spec, S_response_tags);
    if (tags == NULL)
        return -1;
    if (tags == Py_None) {
        Py_DECREF(tags);
        return 0;
    }
    PyObject *args[3] = {frame, at, version};
    PyObject *r = PyObject_Vectorcall(tags, args, 3, NULL);
    Py_DECREF(tags);
    if (r == NULL)
        return -1;
    int needless = r == Py_False;
    Py_DECREF(r);
    return needless;
}

/* raise CLOSE_ERROR(prefix + str(error), "upstream"), both new references taken (NULL: making
 * it failed, its error is set): always -1 */
static int pair_close_as(PyObject *error, PyObject *prefix)
{
    PyObject *reason = error == NULL || prefix == NULL ? NULL : PyUnicode_FromFormat("%U%S", prefix, error);
    Py_XDECREF(error);
    Py_XDECREF(prefix);
    if (reason != NULL) {
        raise_close(reason, S_upstream);
        Py_DECREF(reason);
    }
    return -1;
}

/* slot's response `frame` (view: its buffer, at least 9 bytes; no tagged field in a flexible
 * response header), neither merged nor under a quota: _complete's plain case */
static int complete_plain(PyObject *conn, PyObject *slot, PyObject *spec, PyObject *frame, const Py_buffer *view)
{
    PyObject *header = PyObject_GetAttr(slot, S_header);
    if (header == NULL)
        return -1;
    int done = -1;
    PyObject *data = NULL, *rewrite = NULL;
    const unsigned char *b = view->buf;
    int ok = 1;
    long expected = attr_long(header, S_correlation_id, &ok);
    if (!ok)
        goto out;
    int32_t got = (int32_t)((uint32_t)b[4] << 24 | (uint32_t)b[5] << 16 | (uint32_t)b[6] << 8 | b[7]);
    if (got != expected) {  /* the reference raises the close, naming both */
        PyObject *r = call_method(conn, S__check_correlation, slot, frame);
        if (r == NULL)
            goto out;
        Py_DECREF(r);
    }
    /* observed before the response can reach the client, as the reference */
    PyObject *sent = PyObject_GetAttr(slot, S_sent_at);
    double sent_at = sent == NULL ? -1.0 : PyFloat_AsDouble(sent);
    Py_XDECREF(sent);
    if (sent == NULL || (sent_at == -1.0 && PyErr_Occurred()))
        goto out;
    PyObject *metrics = PyObject_GetAttr(conn, S_metrics);
    PyObject *listener = metrics == NULL ? NULL : PyObject_GetAttr(conn, S_listener_name);
    PyObject *name = listener == NULL ? NULL : PyObject_GetAttr(spec, S_name);
    PyObject *child = name == NULL ? NULL : latency_child(metrics, listener, name);
    Py_XDECREF(metrics);
    Py_XDECREF(listener);
    Py_XDECREF(name);
    if (child == NULL)
        goto out;
    PyObject *elapsed = PyFloat_FromDouble(monotonic_now() - sent_at);
    int observed = elapsed == NULL ? -1 : observe_impl(child, elapsed);
    Py_DECREF(child);
    Py_XDECREF(elapsed);
    if (observed < 0)
        goto out;
    rewrite = PyObject_GetAttr(spec, S_rewrite_response);
    if (rewrite == NULL)
        goto out;
    PyObject *body = Py_NewRef(Py_None);
    Py_ssize_t off = 8;
    if (rewrite != Py_None) {
        Py_DECREF(body);
        int flexible = attr_true(header, S_flexible);
        PyObject *version = flexible < 0 ? NULL : PyObject_GetAttr(header, S_api_version);
        PyObject *listener_obj = version == NULL ? NULL : PyObject_GetAttr(conn, S_listener);
        PyObject *nodes = listener_obj == NULL ? NULL : PyObject_GetAttr(listener_obj, S_node_map);
        Py_XDECREF(listener_obj);
        PyObject *at = NULL;
        if (nodes != NULL) {
            off = flexible ? 9 : 8;
            at = PyLong_FromSsize_t(off);
        }
        body = NULL;
        int needless = at == NULL ? -1 : flexible ? rewrite_needless(spec, frame, at, version) : 0;
        if (needless > 0) {
            body = Py_NewRef(Py_None);
        } else if (needless == 0) {
            PyObject *args[4] = {version, frame, at, nodes};
            body = PyObject_Vectorcall(rewrite, args, 4, NULL);
        }
        Py_XDECREF(version);
        Py_XDECREF(nodes);
        Py_XDECREF(at);
        if (body == NULL) {
            if (PyErr_ExceptionMatches(CODEC_ERROR)) {
                PyObject *error = take_error();
                PyObject *spec_name = PyObject_GetAttr(spec, S_name);
                pair_close_as(error, spec_name == NULL ? NULL
                              : PyUnicode_FromFormat("cannot rewrite upstream %S response: ", spec_name));
                Py_XDECREF(spec_name);
            }
            goto out;
        }
    }
    if (body == Py_None) {
        Py_DECREF(body);
        data = Py_NewRef(frame);
    } else {  /* 4-byte size, the response header as it came, the new body */
        Py_buffer nb;
        int got_body = PyObject_GetBuffer(body, &nb, PyBUF_SIMPLE);
        Py_DECREF(body);
        if (got_body < 0)
            goto out;
        Py_ssize_t size = (off - 4) + nb.len;
        if (size > INT32_MAX) {
            PyBuffer_Release(&nb);
            PyErr_SetString(PyExc_OverflowError, "a rewritten response over 2 GiB");
            goto out;
        }
        data = PyBytes_FromStringAndSize(NULL, 4 + size);
        if (data != NULL) {
            unsigned char *d = (unsigned char *)PyBytes_AS_STRING(data);
            d[0] = (unsigned char)(size >> 24);
            d[1] = (unsigned char)(size >> 16);
            d[2] = (unsigned char)(size >> 8);
            d[3] = (unsigned char)size;
            memcpy(d + 4, b + 4, (size_t)(off - 4));
            memcpy(d + off, nb.buf, (size_t)nb.len);
        }
        PyBuffer_Release(&nb);
        if (data == NULL)
            goto out;
    }
    Py_ssize_t n = PyObject_Length(data);
    if (n < 0 || PyObject_SetAttr(slot, S_data, data) < 0 || add_to(conn, S_unsent, n) < 0)
        goto out;
    done = 0;
out:
    Py_DECREF(header);
    Py_XDECREF(rewrite);
    Py_XDECREF(data);
    return done;
}

/* Whether a response of `size` bytes to `slot` is completed on a worker thread (the reference's
 * conn.heavy): 1, 0, or -1 with an exception set */
static int goes_to_worker(PyObject *conn, PyObject *slot, PyObject *spec, PyObject *merge, Py_ssize_t size)
{
    int large = attr_true(slot, S_large);
    if (large)
        return large;
    Py_ssize_t offload = attr_size(conn, S__offload_response);
    if (offload == -1 && PyErr_Occurred())
        return -1;
    if (size <= offload)
        return 0;
    if (merge != Py_None)
        return 1;
    PyObject *rewrite = PyObject_GetAttr(spec, S_rewrite_response);
    if (rewrite == NULL)
        return -1;
    int rewrites = rewrite != Py_None;
    Py_DECREF(rewrite);
    if (!rewrites)
        return 0;
    int ok = 1;
    long key = attr_long(spec, S_api_key, &ok);
    if (!ok)
        return -1;
    return key != 0 && key != 1;
}

/* One paired response: 0, or -1 with an exception set */
static int complete_one(PyObject *conn, PyObject *slot, PyObject *spec, PyObject *merge, PyObject *frame,
                        const Py_buffer *view)
{
    const unsigned char *b = view->buf;
    int plain = merge == Py_None && view->len >= 9;
    if (plain) {
        PyObject *quota = PyObject_GetAttr(slot, S_quota);
        if (quota == NULL)
            return -1;
        plain = quota == Py_None;
        Py_DECREF(quota);
    }
    if (plain && b[8] != 0) {  /* a flexible response header with tagged fields: the reference's */
        PyObject *header = PyObject_GetAttr(slot, S_header);
        int flexible = header == NULL ? -1 : attr_true(header, S_flexible);
        Py_XDECREF(header);
        if (flexible < 0)
            return -1;
        plain = !flexible;
    }
    if (plain)
        return complete_plain(conn, slot, spec, frame, view);
    PyObject *r = call_method(conn, S__complete, slot, frame);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int complete_impl(PyObject *conn, PyObject *dec)
{
    if (NEED_DATA == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "complete_responses: configure_core was not called");
        return -1;
    }
    PyObject *in_flight = PyObject_GetAttr(conn, S_in_flight);
    if (in_flight == NULL)
        return -1;
    int completed = 0, failed = 1;
    for (;;) {
        PyObject *frame = PyObject_CallMethodNoArgs(dec, S_next_frame);
        if (frame == NULL) {
            if (PyErr_ExceptionMatches(FRAME_ERROR))
                pair_close_as(take_error(), Py_NewRef(S_bad_frame));
            goto out;
        }
        if (frame == NEED_DATA) {
            Py_DECREF(frame);
            break;
        }
        Py_ssize_t waiting = PyObject_Length(in_flight);
        if (waiting <= 0) {
            Py_DECREF(frame);
            if (waiting == 0)
                raise_close(S_nobody_asked, S_upstream);
            goto out;
        }
        PyObject *slot = PyObject_CallMethodNoArgs(in_flight, S_popleft);
        PyObject *spec = slot == NULL ? NULL : PyObject_GetAttr(slot, S_spec);
        PyObject *merge = spec == NULL ? NULL : PyObject_GetAttr(slot, S_merge);
        Py_buffer view;
        int viewed = merge == NULL ? -1 : PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE);
        int heavy = viewed < 0 ? -1 : goes_to_worker(conn, slot, spec, merge, view.len);
        int step = heavy;
        if (heavy == 1) {  /* the caller completes it on a worker thread, then goes on */
            PyObject *pair = PyTuple_Pack(2, slot, frame);
            step = pair == NULL ? -1 : PyObject_SetAttr(conn, S_heavy, pair);
            Py_XDECREF(pair);
        } else if (heavy == 0) {
            step = complete_one(conn, slot, spec, merge, frame, &view);
        }
        if (viewed == 0)
            PyBuffer_Release(&view);
        Py_DECREF(frame);
        Py_XDECREF(slot);
        Py_XDECREF(spec);
        Py_XDECREF(merge);
        if (step < 0)
            goto out;
        if (heavy) {
            failed = 0;
            goto out;
        }
        completed = 1;
        Py_ssize_t buffered = attr_size(dec, S_buffered);
        if (buffered < 0)
            goto out;
        if (!buffered)  /* nothing more was read: no frame to look for */
            break;
    }
    if (completed) {
        PyObject *cluster = PyObject_GetAttr(conn, S__cluster);
        PyObject *since = cluster == NULL ? NULL : PyObject_GetAttr(cluster, S_timing_out_since);
        int answered = since == NULL ? -1 : (since == Py_None ? 0 : call_for_effect(cluster, S_answered, NULL));
        Py_XDECREF(cluster);
        Py_XDECREF(since);
        if (answered < 0)
            goto out;
    }
    failed = 0;
out:
    Py_DECREF(in_flight);
    return failed ? -1 : completed;
}

static PyObject *complete_responses(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "complete_responses(conn, decoder) takes 2 arguments");
        return NULL;
    }
    int completed = complete_impl(args[0], args[1]);
    if (completed < 0)
        return NULL;
    return Py_NewRef(completed ? Py_True : Py_False);
}

/* Whether the upstream's next read is only a head (HEAD bytes): a response that may be spliced
 * begins (the decoder defers large frames, the oldest request's API has a walker, nothing is
 * buffered); 1, 0, or -1 with an exception set */
static int head_only(PyObject *dec, PyObject *in_flight)
{
    int defers = attr_true(dec, S_defer_from);
    if (defers <= 0)
        return defers;
    Py_ssize_t n = PyObject_Length(in_flight);
    if (n <= 0)
        return n < 0 ? -1 : 0;
    PyObject *slot = PySequence_GetItem(in_flight, 0);
    if (slot == NULL)
        return -1;
    PyObject *spec = PyObject_GetAttr(slot, S_spec);
    Py_DECREF(slot);
    if (spec == NULL)
        return -1;
    int walks = attr_true(spec, S_stream_response);
    Py_DECREF(spec);
    if (walks <= 0)
        return walks;
    Py_ssize_t buffered = attr_size(dec, S_buffered);
    return buffered < 0 ? -1 : buffered == 0;
}

/* DataPlane._read_upstream: a read of the upstream, its whole responses paired with their
 * requests and written to the client in order; a large one to a worker thread (the lane paused)
 * or passed on as it arrives; then the requests max_in_flight held back */
static int read_upstream_impl(PyObject *plane, PyObject *lane)
{
    PyObject *dec = get_attr(lane, S_udec);
    PyObject *conn = dec == NULL ? NULL : get_attr(lane, S_conn);
    PyObject *in_flight = conn == NULL ? NULL : PyObject_GetAttr(conn, S_in_flight);
    int done = -1;
    if (in_flight == NULL)
        goto out;
    int head = head_only(dec, in_flight);
    if (head < 0)
        goto out;
    int ok = 1;
    long fd = attr_long(lane, S_ufd, &ok);
    if (!ok)
        goto out;
    Py_ssize_t n = receive_impl((int)fd, dec, head ? HEAD : RECV, RECV_INTO_MIN);
    if (n < -1)
        goto out;
    if (n == 0) {
        raise_close(S_upstream_closed, S_upstream);
        goto out;
    }
    if (n < 0) {
        done = 0;
        goto out;
    }
    int completed = complete_impl(conn, dec);  /* (conn.complete_responses) */
    if (completed < 0)
        goto out;
    PyObject *heavy = PyObject_GetAttr(conn, S_heavy);
    if (heavy == NULL)
        goto out;
    int is_heavy = heavy != Py_None;
    Py_DECREF(heavy);
    if (completed && flush_client_impl(lane) < 0)
        goto out;
    if (is_heavy) {  /* a large response to decode: on a worker thread, the lane paused */
        if (set_field(lane, S_paused, Py_True) < 0 || call_for_effect(lane, S_post, MSG_HEAVY) < 0)
            goto out;
        done = 0;
        goto out;
    }
    int deferred = attr_true(dec, S_deferred);
    if (deferred < 0)
        goto out;
    if (deferred) {  /* a large response begins: passed on as it arrives if it can be */
        if (call_for_effect(plane, S_open_splicing, lane) < 0)
            goto out;
        PyObject *sp = get_attr(lane, S_splicing);
        if (sp == NULL)
            goto out;
        int spliced = sp != Py_None;
        Py_DECREF(sp);
        if (spliced) {
            done = 0;
            goto out;
        }
    }
    if (completed) {  /* requests held back by max_in_flight may go now */
        PyObject *cdec = get_attr(lane, S_cdec);
        if (cdec == NULL)
            goto out;
        Py_ssize_t buffered = attr_size(cdec, S_buffered);
        Py_DECREF(cdec);
        if (buffered < 0)
            goto out;
        int paused = buffered ? attr_true(lane, S_paused) : 1;
        if (paused < 0 || (!paused && process_client_impl(plane, lane) < 0))
            goto out;
    }
    done = 0;
out:
    Py_XDECREF(dec);
    Py_XDECREF(conn);
    Py_XDECREF(in_flight);
    return done;
}

static int handlers_ready(Py_ssize_t nargs, const char *name)
{
    if (NEED_DATA == NULL || WRITE_FAILED == NULL) {
        PyErr_Format(PyExc_RuntimeError, "%s: the handlers are not configured", name);
        return 0;
    }
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "%s(plane, lane) takes 2 arguments", name);
        return 0;
    }
    return 1;
}

#define HANDLER(name, call)                                                          \
    static PyObject *name(PyObject *module, PyObject *const *args, Py_ssize_t nargs) \
    {                                                                                \
        if (!handlers_ready(nargs, #name))                                           \
            return NULL;                                                             \
        learn_lane(args[1]);                                                         \
        if ((call) < 0)                                                              \
            return NULL;                                                             \
        Py_RETURN_NONE;                                                              \
    }

HANDLER(read_client, read_client_impl(args[0], args[1]))
HANDLER(read_upstream, read_upstream_impl(args[0], args[1]))
HANDLER(process_client, process_client_impl(args[0], args[1]))
HANDLER(flush_client, flush_client_impl(args[1]))

/* ---------------------------------------------------------------- the express dispatch
 * express(conn, frame, uout): what ConnectionCore._dispatch does with the request it sees most,
 * without the interpreter's ~550 bytecodes: the usual Produce request (one topic, by name or by an
 * id the gateway learned (gw.topic_ids), each partition one batch produce_sole's walk passes, none
 * transactional; not large, as ConnectionCore._is_large says of a Produce request) on a connection
 * with no client quota, no SASL session or one plainly logged in (not expiring), its upstream open
 * and its routes current.  With an authorizer, only what its decision memo allows: the memo is
 * asked, as _dispatch asks it, for the same Action object (protocol/auth_helper.py's literal_action
 * table; an action not made yet is not express), by memo_allows (a StandardDecisionMemo's allows in
 * C, yes only where allows says yes; any other memo's allows()), so the decision stays the memo's;
 * without one, any such request (_dispatch's enforcement forwards every Produce then).  It then
 * does what _dispatch does: the request's counter (and the memo's count) deferred on the lane, the
 * client id, the slot (its deadline the request timeout plus the Produce timeout) in pending and in
 * flight, the first one's hook, the frame on uout.  1 when it did; 0, having changed nothing, for
 * any other request or state (the handler then calls conn.dispatch, its reference); -1 with an
 * exception set.  tests/unit/gateway/test_express.py holds it to _dispatch on the same connections
 * and requests, with an authorizer and without. */
static PyObject *X_HEADER, *X_SOLE, *X_FORWARDED, *X_SOLE_ACTION, *X_PEEK, *X_ACTIONS, *X_TOPIC, *X_WRITE,
    *X_SLOT, *X_COMPLETE;
static PyObject *S__quota_map, *S_auth, *S_session, *S_state, *S_expires_at, *S_gw, *S_advertised_cached,
    *S__routes_for, *S__routes, *S__offload_request, *S__memo, *S__context, *S_principal, *S__upstream,
    *S_client_id, *S_lane, *S__request_timeout_s, *S__on_first_in_flight, *S_deadline, *S_size,
    *S__offload_produce, *S_topic_ids, *S_name_of;

/* A Slot (gateway/connection/core.py) as Slot(header, spec, None, sent_at, deadline) makes it,
 * without running its __init__. */
static PyObject *new_slot(PyObject *header, PyObject *spec, double sent_at, double deadline)
{
    PyTypeObject *type = (PyTypeObject *)X_SLOT;
    PyObject *slot = type->tp_alloc(type, 0);
    if (slot == NULL)
        return NULL;
    PyObject *sent = PyFloat_FromDouble(sent_at), *until = sent ? PyFloat_FromDouble(deadline) : NULL;
    if (until == NULL || PyObject_SetAttr(slot, S_header, header) < 0 || PyObject_SetAttr(slot, S_spec, spec) < 0
        || PyObject_SetAttr(slot, S_merge, Py_None) < 0 || PyObject_SetAttr(slot, S_quota, Py_None) < 0
        || PyObject_SetAttr(slot, S_large, Py_False) < 0 || PyObject_SetAttr(slot, S_data, Py_None) < 0
        || PyObject_SetAttr(slot, S_sent_at, sent) < 0 || PyObject_SetAttr(slot, S_deadline, until) < 0)
        Py_CLEAR(slot);
    Py_XDECREF(sent);
    Py_XDECREF(until);
    return slot;
}

/* var = obj.name (a new reference), or on to `out` with the error set */
#define GET(var, obj, name)                  \
    if ((var = PyObject_GetAttr(obj, name)) == NULL) \
        goto out;

/* What express reads from the gateway and asks of the connection, without the frames of a
 * property and a hook that do little (configure_gateway and configure_hooks name their classes
 * and functions; any other class's are called): gateway/process/server.py's
 * Gateway.advertised_cached, from its fields; the connection's _on_first_in_flight, not called
 * where it is ConnectionCore's (it does nothing) or ClientConnection's while its upstream side has
 * no cancel scope to move (it does nothing then either). */
static PyObject *GATEWAY_CLASS, *HOOK_NONE, *HOOK_SCOPE, *S__advertised, *S__advertised_for, *S_cluster,
    *S_versions, *S_upstream_side, *S_scope;

/* gw.advertised_cached, a new reference (NULL with an exception set) */
static PyObject *advertised_of(PyObject *gw)
{
    if (GATEWAY_CLASS == NULL || (PyObject *)Py_TYPE(gw) != GATEWAY_CLASS)
        return PyObject_GetAttr(gw, S_advertised_cached);
    PyObject *made_for = PyObject_GetAttr(gw, S__advertised_for);
    PyObject *cluster = made_for == NULL ? NULL : PyObject_GetAttr(gw, S_cluster);
    PyObject *versions = cluster == NULL ? NULL : PyObject_GetAttr(cluster, S_versions);
    PyObject *result = versions == NULL ? NULL
                       : (made_for == versions ? PyObject_GetAttr(gw, S__advertised) : Py_NewRef(Py_None));
    Py_XDECREF(made_for);
    Py_XDECREF(cluster);
    Py_XDECREF(versions);
    return result;
}

/* conn._on_first_in_flight(slot) where it does something: 0, or -1 with an exception set */
static int first_in_flight(PyObject *conn, PyObject *slot)
{
    PyObject *hook = PyObject_GetAttr(conn, S__on_first_in_flight);
    if (hook == NULL)
        return -1;
    int idle = 0;
    if (PyMethod_Check(hook) && PyMethod_GET_SELF(hook) == conn) {
        PyObject *fn = PyMethod_GET_FUNCTION(hook);
        if (fn == HOOK_NONE) {
            idle = 1;
        } else if (fn == HOOK_SCOPE) {
            PyObject *side = PyObject_GetAttr(conn, S_upstream_side);
            PyObject *scope = side == NULL ? NULL : PyObject_GetAttr(side, S_scope);
            Py_XDECREF(side);
            if (scope == NULL) {
                Py_DECREF(hook);
                return -1;
            }
            idle = scope == Py_None;
            Py_DECREF(scope);
        }
    }
    PyObject *r = idle ? Py_NewRef(Py_None) : PyObject_CallOneArg(hook, slot);
    Py_DECREF(hook);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int express_impl(PyObject *conn, PyObject *frame, PyObject *uout)
{
    if (X_SLOT == NULL)
        return 0;
    Py_buffer view;  /* a Produce request (API key 0) or nothing more is asked */
    if (PyObject_GetBuffer(frame, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();  /* (the reference says what it is) */
        return 0;
    }
    const unsigned char *head = (const unsigned char *)view.buf;
    Py_ssize_t size = view.len;
    int produce = size >= 6 && head[4] == 0 && head[5] == 0;
    PyBuffer_Release(&view);
    if (!produce)
        return 0;
    int result = -1;
    PyObject *quota_map = NULL, *auth = NULL, *session = NULL, *state = NULL, *expires = NULL, *gw = NULL,
             *advertised = NULL, *routes_for = NULL, *routes = NULL, *body = NULL, *header = NULL, *key = NULL,
             *route = NULL, *memo = NULL, *context = NULL, *principal = NULL, *own = NULL, *upstream = NULL,
             *flexible = NULL, *hsize = NULL, *version = NULL, *api_key = NULL, *sole = NULL, *action_key = NULL,
             *action = NULL, *lane = NULL, *deferred = NULL, *client_id = NULL, *slot = NULL,
             *pending = NULL, *in_flight = NULL, *topic_ids = NULL, *named = NULL;

    GET(quota_map, conn, S__quota_map)
    int truth = PyObject_IsTrue(quota_map);
    if (truth != 0)
        goto declined_or_failed;
    GET(auth, conn, S_auth)
    if (auth == Py_None)
        goto declined;
    GET(session, auth, S_session)
    if (session != Py_None) {  /* a SASL connection: logged in, and no session lifetime (KIP-368) to check */
        GET(state, session, S_state)
        GET(expires, session, S_expires_at)
        if (state != X_COMPLETE || expires != Py_None)
            goto declined;
    }
    Py_ssize_t offload = attr_size(conn, S__offload_request);
    if (offload == -1 && PyErr_Occurred())
        goto out;
    if (size > offload) {  /* above Produce's own limit too, a large request: inspected on a worker thread */
        Py_ssize_t offload_produce = attr_size(conn, S__offload_produce);
        if (offload_produce == -1 && PyErr_Occurred())
            goto out;
        if (size > offload_produce)
            goto declined;
    }
    if ((body = PySequence_GetSlice(frame, 4, size)) == NULL || (header = PyObject_CallOneArg(X_HEADER, body)) == NULL)
        goto out;
    if (header == Py_None)
        goto declined;
    GET(gw, conn, S_gw)
    if ((advertised = advertised_of(gw)) == NULL)
        goto out;
    GET(routes_for, conn, S__routes_for)
    if (advertised == Py_None || advertised != routes_for)
        goto declined;
    GET(routes, conn, S__routes)
    GET(api_key, header, S_api_key)
    GET(version, header, S_api_version)
    long k = PyLong_AsLong(api_key), v = PyLong_AsLong(version);
    if ((k == -1 || v == -1) && PyErr_Occurred())
        goto out;
    if (!PyDict_CheckExact(routes) || (key = PyLong_FromLong(k * 65536 + v)) == NULL)
        goto declined_or_failed;
    route = PyDict_GetItemWithError(routes, key);
    if (route == NULL)
        goto declined_or_failed;
    Py_INCREF(route);
    if (!PyTuple_CheckExact(route) || PyTuple_GET_SIZE(route) != 5 || PyTuple_GET_ITEM(route, 0) != X_FORWARDED)
        goto declined;
    /* with an authorizer the route names Produce's sole action; without one, Produce's peek and no
     * action: then _dispatch's enforcement forwards any Produce request, and so does this path */
    int authorized = PyTuple_GET_ITEM(route, 4) == X_SOLE_ACTION;
    if (!authorized && (PyTuple_GET_ITEM(route, 4) != Py_None || PyTuple_GET_ITEM(route, 3) != X_PEEK))
        goto declined;
    if (authorized) {
        GET(memo, conn, S__memo)
        GET(context, conn, S__context)
        if (memo == Py_None || context == Py_None)
            goto declined;
        GET(principal, context, S_principal)
        GET(own, conn, S_principal)
        if (principal != own)
            goto declined;
    }
    GET(upstream, conn, S__upstream)
    if (upstream == Py_None)
        goto declined;
    GET(flexible, header, S_flexible)
    GET(hsize, header, S_size)
    PyObject *walk_args[4] = {body, hsize, flexible, version};
    if ((sole = PyObject_Vectorcall(X_SOLE, walk_args, 4, NULL)) == NULL)
        goto out;
    if (sole == Py_None)
        goto declined;
    if (!PyTuple_CheckExact(sole) || PyTuple_GET_SIZE(sole) != 4) {
        PyErr_SetString(PyExc_TypeError, "express: produce_sole returned no (name, partitions, acks, timeout)");
        goto out;
    }
    if (authorized) {
        PyObject *topic = PyTuple_GET_ITEM(sole, 0);
        if (v >= 13) {  /* by id: the name the gateway learned (gw.topic_ids.name_of), as _sole_action asks */
            GET(topic_ids, gw, S_topic_ids)
            if ((named = call_method(topic_ids, S_name_of, topic, NULL)) == NULL)
                goto out;
            if (named == Py_None)
                goto declined;
            topic = named;
        }
        if ((action_key = PyTuple_Pack(6, X_TOPIC, topic, X_WRITE, PyTuple_GET_ITEM(sole, 1),
                                       Py_True, Py_True)) == NULL)
            goto out;
        action = PyDict_GetItemWithError(X_ACTIONS, action_key);
        if (action == NULL)  /* not asked yet on any connection: _dispatch makes it */
            goto declined_or_failed;
        Py_INCREF(action);
    }
    GET(lane, conn, S_lane)
    if (lane == Py_None)
        goto declined;
    if ((deferred = get_attr(lane, S_deferred)) == NULL)
        goto out;
    if (!PyList_CheckExact(deferred))
        goto declined;
    Py_ssize_t counted = PyList_GET_SIZE(deferred);  /* where the request's counter goes */
    truth = authorized ? memo_allows(memo, action, deferred) : 1;
    if (truth <= 0)  /* not the memo's to allow: _dispatch enforces it (the memo deferred nothing) */
        goto declined_or_failed;
    if (PyList_Insert(deferred, counted, PyTuple_GET_ITEM(route, 2)) < 0)  /* before the memo's count, as _dispatch */
        goto out;
    /* from here on, what _dispatch does with a request it forwards on the memo's word */
    GET(client_id, header, S_client_id)
    if (PyObject_SetAttr(conn, S_client_id, client_id) < 0)
        goto out;
    long acks = PyLong_AsLong(PyTuple_GET_ITEM(sole, 2)), timeout_ms = PyLong_AsLong(PyTuple_GET_ITEM(sole, 3));
    if ((acks == -1 || timeout_ms == -1) && PyErr_Occurred())
        goto out;
    if (acks != 0) {  /* it expects a response: its slot (ConnectionCore._track) */
        PyObject *timeout_obj = PyObject_GetAttr(conn, S__request_timeout_s);
        double timeout_s = timeout_obj == NULL ? -1.0 : PyFloat_AsDouble(timeout_obj);
        Py_XDECREF(timeout_obj);
        if (timeout_s == -1.0 && PyErr_Occurred())
            goto out;
        double now = monotonic_now();
        if ((slot = new_slot(header, PyTuple_GET_ITEM(route, 1), now,
                             now + timeout_s + (timeout_ms > 0 ? timeout_ms : 0) / 1000.0)) == NULL)
            goto out;
        GET(pending, conn, S_pending)
        GET(in_flight, conn, S_in_flight)
        if (call_for_effect(pending, S_append, slot) < 0 || call_for_effect(in_flight, S_append, slot) < 0)
            goto out;
        Py_ssize_t n = PyObject_Length(in_flight);
        if (n < 0 || (n == 1 && first_in_flight(conn, slot) < 0))
            goto out;
    }
    if (call_for_effect(uout, S_append, frame) < 0)
        goto out;
    result = 1;
    goto out;
declined_or_failed:
    if (PyErr_Occurred())
        goto out;
declined:
    result = 0;
out:
    Py_XDECREF(quota_map); Py_XDECREF(auth); Py_XDECREF(session); Py_XDECREF(state); Py_XDECREF(expires);
    Py_XDECREF(gw); Py_XDECREF(advertised); Py_XDECREF(routes_for); Py_XDECREF(routes); Py_XDECREF(body);
    Py_XDECREF(header); Py_XDECREF(key); Py_XDECREF(route); Py_XDECREF(memo); Py_XDECREF(context);
    Py_XDECREF(principal); Py_XDECREF(own); Py_XDECREF(upstream); Py_XDECREF(flexible); Py_XDECREF(hsize);
    Py_XDECREF(version); Py_XDECREF(api_key); Py_XDECREF(sole); Py_XDECREF(action_key); Py_XDECREF(action);
    Py_XDECREF(lane); Py_XDECREF(deferred); Py_XDECREF(client_id); Py_XDECREF(slot);
    Py_XDECREF(pending); Py_XDECREF(in_flight); Py_XDECREF(topic_ids); Py_XDECREF(named);
    return result;
}
#undef GET

static PyObject *express(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "express(conn, frame, uout) takes 3 arguments");
        return NULL;
    }
    int done = express_impl(args[0], args[1], args[2]);
    if (done < 0)
        return NULL;
    return PyBool_FromLong(done);
}

static PyObject *configure_express(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 10) {
        PyErr_SetString(PyExc_TypeError, "configure_express(request_header, produce_sole, forwarded, sole_action, "
                        "peek, actions, topic, write, slot_class, sasl_complete) takes 10 arguments");
        return NULL;
    }
    if (!PyDict_CheckExact(args[5]) || !PyType_Check(args[8])) {
        PyErr_SetString(PyExc_TypeError, "configure_express: actions is a dict and slot_class a class");
        return NULL;
    }
    PyObject **slots[10] = {&X_HEADER, &X_SOLE, &X_FORWARDED, &X_SOLE_ACTION, &X_PEEK, &X_ACTIONS, &X_TOPIC,
                            &X_WRITE, &X_SLOT, &X_COMPLETE};
    for (int i = 0; i < 10; i++)
        Py_XSETREF(*slots[i], Py_NewRef(args[i]));
    Py_RETURN_NONE;
}

static PyObject *configure_gateway(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    return set_class(&GATEWAY_CLASS, args, nargs, "configure_gateway(gateway_class) takes a class");
}

static PyObject *configure_hooks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyFunction_Check(args[0]) || !PyFunction_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "configure_hooks(does_nothing, moves_scope) takes two functions");
        return NULL;
    }
    Py_XSETREF(HOOK_NONE, Py_NewRef(args[0]));
    Py_XSETREF(HOOK_SCOPE, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

static PyObject *configure_core(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError,
                        "configure_core(need_data, frame_error, close_error, codec_error) takes 4 arguments");
        return NULL;
    }
    for (int i = 1; i < 4; i++) {
        if (!PyType_Check(args[i])) {
            PyErr_SetString(PyExc_TypeError, "configure_core: frame_error, close_error and codec_error are classes");
            return NULL;
        }
    }
    Py_XSETREF(NEED_DATA, Py_NewRef(args[0]));
    Py_XSETREF(FRAME_ERROR, Py_NewRef(args[1]));
    Py_XSETREF(CLOSE_ERROR, Py_NewRef(args[2]));
    Py_XSETREF(CODEC_ERROR, Py_NewRef(args[3]));
    Py_RETURN_NONE;
}

static PyObject *configure(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "configure(need_throttle, write_failed, quantum, recv, recv_frame, "
                        "recv_into_min, head) takes 7 arguments");
        return NULL;
    }
    Py_ssize_t sizes[5];
    for (int i = 0; i < 5; i++) {
        sizes[i] = PyLong_AsSsize_t(args[2 + i]);
        if (sizes[i] == -1 && PyErr_Occurred())
            return NULL;
        if (sizes[i] <= 0) {
            PyErr_SetString(PyExc_ValueError, "configure: the quantum and the read sizes must be positive");
            return NULL;
        }
    }
    if (!PyType_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "configure: need_throttle must be a class");
        return NULL;
    }
    Py_XSETREF(NEED_THROTTLE, Py_NewRef(args[0]));
    Py_XSETREF(WRITE_FAILED, Py_NewRef(args[1]));
    QUANTUM = sizes[0];
    RECV = sizes[1];
    RECV_FRAME = sizes[2];
    RECV_INTO_MIN = sizes[3];
    HEAD = sizes[4];
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"serve", (PyCFunction)(void (*)(void))serve, METH_FASTCALL,
     "serve(plane, timeout_ms) -> events polled: one poll of the data plane and the events it returned"},
    {"receive", (PyCFunction)(void (*)(void))receive, METH_FASTCALL,
     "receive(fd, decoder, size, into_min) -> bytes read into decoder: 0 at end of stream, -1 if none"},
    {"set_masks", (PyCFunction)(void (*)(void))set_masks, METH_FASTCALL,
     "set_masks(plane, lane): register the lane's descriptors for what its state asks"},
    {"read_client", (PyCFunction)(void (*)(void))read_client, METH_FASTCALL,
     "read_client(plane, lane): DataPlane._read_client"},
    {"read_upstream", (PyCFunction)(void (*)(void))read_upstream, METH_FASTCALL,
     "read_upstream(plane, lane): DataPlane._read_upstream"},
    {"process_client", (PyCFunction)(void (*)(void))process_client, METH_FASTCALL,
     "process_client(plane, lane): DataPlane._process_client"},
    {"flush_client", (PyCFunction)(void (*)(void))flush_client, METH_FASTCALL,
     "flush_client(plane, lane): DataPlane._flush_client"},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_FASTCALL,
     "configure(need_throttle, write_failed, quantum, recv, recv_frame, recv_into_min, head): what the "
     "handlers take from the data plane"},
    {"complete_responses", (PyCFunction)(void (*)(void))complete_responses, METH_FASTCALL,
     "complete_responses(conn, decoder) -> bool: ConnectionCore.complete_responses"},
    {"observe", (PyCFunction)(void (*)(void))observe, METH_FASTCALL,
     "observe(child, amount): child.observe(amount), in C for the class configure_metrics named"},
    {"lane_metrics", (PyCFunction)(void (*)(void))lane_metrics, METH_FASTCALL,
     "lane_metrics(lane): lane.metrics(), in C for a lane of the class configure_lane named"},
    {"configure_lane", (PyCFunction)(void (*)(void))configure_lane, METH_FASTCALL,
     "configure_lane(lane_class): the lanes whose metrics() lane_metrics and the handlers count in C"},
    {"configure_metrics", (PyCFunction)(void (*)(void))configure_metrics, METH_FASTCALL,
     "configure_metrics(counter_child, histogram_child): the per-thread metrics children added to in C"},
    {"express", (PyCFunction)(void (*)(void))express, METH_FASTCALL,
     "express(conn, frame, uout) -> bool: ConnectionCore.dispatch of the usual Produce request, forwarded on the "
     "decision memo's word (False, nothing done, for any other)"},
    {"configure_express", (PyCFunction)(void (*)(void))configure_express, METH_FASTCALL,
     "configure_express(request_header, produce_sole, forwarded, sole_action, peek, actions, topic, write, "
     "slot_class, sasl_complete): what express takes from protocol and gateway/connection/core.py"},
    {"configure_decoder", (PyCFunction)(void (*)(void))configure_decoder, METH_FASTCALL,
     "configure_decoder(frame_decoder): the decoder class whose to_come and partial_space the reads take "
     "from its fields"},
    {"configure_gateway", (PyCFunction)(void (*)(void))configure_gateway, METH_FASTCALL,
     "configure_gateway(gateway_class): the gateway whose advertised_cached express reads from its fields"},
    {"configure_hooks", (PyCFunction)(void (*)(void))configure_hooks, METH_FASTCALL,
     "configure_hooks(does_nothing, moves_scope): ConnectionCore's and ClientConnection's _on_first_in_flight, "
     "which express calls only where they do something"},
    {"configure_memo", (PyCFunction)(void (*)(void))configure_memo, METH_FASTCALL,
     "configure_memo(memo_class, metrics_class, logger_class, audit_logger, monotonic, window_s): the decision "
     "memo whose allows and inc express and the lanes' counts do in C"},
    {"memo_allows", (PyCFunction)(void (*)(void))memo_allows_py, METH_FASTCALL,
     "memo_allows(memo, action, later) -> bool: memo.allows(action, later) where it is sure (False: not known here, "
     "nothing done)"},
    {"count", (PyCFunction)(void (*)(void))count, METH_FASTCALL,
     "count(counted): counted.inc(), as the lanes count what a request deferred"},
    {"configure_core", (PyCFunction)(void (*)(void))configure_core, METH_FASTCALL,
     "configure_core(need_data, frame_error, close_error, codec_error): what the handlers and the pairing "
     "return and raise"},
    {"write_queue", (PyCFunction)(void (*)(void))write_queue, METH_FASTCALL,
     "write_queue(fd, out) -> bytes written: out's chunks until it is empty or fd would block"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway.connection._plane_steps",
    "The data plane's per-event steps in C (see gateway/connection/plane_steps.py)",
    -1, methods, NULL, NULL, NULL, NULL,
};

static int intern(PyObject **slot, const char *name)
{
    *slot = PyUnicode_InternFromString(name);
    return *slot == NULL ? -1 : 0;
}

PyMODINIT_FUNC PyInit__plane_steps(void)
{
    if (intern(&S_popleft, "popleft") || intern(&S_closed, "closed") || intern(&S_cout, "cout")
        || intern(&S_uout, "uout") || intern(&S_splicing, "splicing") || intern(&S_in_pipe, "in_pipe")
        || intern(&S_moving, "moving") || intern(&S_capacity, "capacity") || intern(&S_need, "need")
        || intern(&S_paused, "paused") || intern(&S_conn, "conn") || intern(&S_draining, "draining")
        || intern(&S_held, "held") || intern(&S_pending, "pending") || intern(&S_max_in_flight, "max_in_flight")
        || intern(&S_unsent, "unsent") || intern(&S_max_unsent, "max_unsent") || intern(&S_backlog, "backlog")
        || intern(&S_requeue, "_requeue") || intern(&S_cmask, "cmask") || intern(&S_umask, "umask")
        || intern(&S_cfd, "cfd") || intern(&S_ufd, "ufd") || intern(&S_epfd, "_epfd") || intern(&S_lanes, "_lanes")
        || intern(&S_wake, "_wake") || intern(&S_client_event, "_client_event")
        || intern(&S_upstream_event, "_upstream_event") || intern(&S_deferred, "deferred")
        || intern(&S_metrics, "metrics") || intern(&S_drained_yet, "_drained_yet") || intern(&S_failed, "_failed")
        || intern(&S_turns, "turns") || intern(&S_ready, "_ready") || intern(&S_commands, "_commands")
        || intern(&S_stop, "_stop") || intern(&S_next_tick, "_next_tick")
        || intern(&S_trusted, "trusted") || intern(&S__buffer, "_buffer") || intern(&S_partial_space, "partial_space")
        || intern(&S_partial_filled, "partial_filled") || intern(&S_receive_data, "receive_data")
        || intern(&S__size, "_size") || intern(&S__fill, "_fill"))
        return NULL;
    if (intern(&S_read_client, "_read_client") || intern(&S_read_upstream, "_read_upstream"))
        return NULL;
    if (intern(&S_cdec, "cdec") || intern(&S_udec, "udec") || intern(&S_n_in, "n_in") || intern(&S_n_out, "n_out")
        || intern(&S_post, "post") || intern(&S_to_come, "to_come") || intern(&S_in_frame, "in_frame")
        || intern(&S_buffered, "buffered") || intern(&S_next_frame, "next_frame") || intern(&S_dispatch, "dispatch")
        || intern(&S_append, "append") || intern(&S_data, "data") || intern(&S_last_read, "last_read")
        || intern(&S_in_flight, "in_flight") || intern(&S_spec, "spec")
        || intern(&S_stream_response, "stream_response") || intern(&S_defer_from, "defer_from")
        || intern(&S_heavy, "heavy")
        || intern(&S_end, "_end") || intern(&S_open_splicing, "_open_splicing") || intern(&S_eof, "eof")
        || intern(&S_await, "await") || intern(&S_upstream, "upstream") || intern(&S_frame, "frame")
        || intern(&S_upstream_closed, "upstream closed the connection"))
        return NULL;
    if (intern(&S__complete, "_complete") || intern(&S_large, "large") || intern(&S_merge, "merge")
        || intern(&S_quota, "quota") || intern(&S_header, "header") || intern(&S_correlation_id, "correlation_id")
        || intern(&S_rewrite_response, "rewrite_response") || intern(&S_api_key, "api_key")
        || intern(&S_api_version, "api_version") || intern(&S_flexible, "flexible") || intern(&S_latency, "latency")
        || intern(&S__latency, "_latency") || intern(&S_response_tags, "response_tags")
        || intern(&S_listener_name, "listener_name") || intern(&S_name, "name") || intern(&S_observe, "observe")
        || intern(&S_sent_at, "sent_at") || intern(&S_listener, "listener") || intern(&S_node_map, "node_map")
        || intern(&S__offload_response, "_offload_response") || intern(&S__cluster, "_cluster")
        || intern(&S_timing_out_since, "timing_out_since") || intern(&S_answered, "answered")
        || intern(&S__check_correlation, "_check_correlation")
        || intern(&S_nobody_asked, "upstream sent a response nobody asked for")
        || intern(&S_bad_frame, "bad frame from upstream: ") || intern(&S__family, "_family")
        || intern(&S__local, "_local") || intern(&S_table, "table") || intern(&S__key, "_key")
        || intern(&S__bounds, "_bounds") || intern(&S_inc, "inc"))
        return NULL;
    if (intern(&S__quota_map, "_quota_map") || intern(&S_auth, "auth") || intern(&S_session, "session")
        || intern(&S_state, "state") || intern(&S_expires_at, "expires_at") || intern(&S_gw, "gw")
        || intern(&S_advertised_cached, "advertised_cached") || intern(&S__routes_for, "_routes_for")
        || intern(&S__routes, "_routes") || intern(&S__offload_request, "_offload_request")
        || intern(&S__memo, "_memo") || intern(&S__context, "_context") || intern(&S_principal, "principal")
        || intern(&S__upstream, "_upstream") || intern(&S_allows, "allows") || intern(&S_client_id, "client_id")
        || intern(&S_lane, "lane") || intern(&S__request_timeout_s, "_request_timeout_s")
        || intern(&S__on_first_in_flight, "_on_first_in_flight") || intern(&S_deadline, "deadline")
        || intern(&S_size, "size") || intern(&S__offload_produce, "_offload_produce")
        || intern(&S_topic_ids, "topic_ids") || intern(&S_name_of, "name_of"))
        return NULL;
    if (intern(&S__allowed, "_allowed") || intern(&S__authorizer, "_authorizer") || intern(&S__data, "_data")
        || intern(&S_audit_sinks, "audit_sinks") || intern(&S__metrics, "_metrics") || intern(&S_disabled, "disabled")
        || intern(&S__cache, "_cache") || intern(&S__clock, "_clock") || intern(&S__lock, "_lock")
        || intern(&S__tallies, "_tallies") || intern(&S__window, "_window") || intern(&S_last, "last")
        || intern(&S__listener, "_listener") || intern(&S_acquire, "acquire") || intern(&S_release, "release")
        || intern(&S__advertised, "_advertised") || intern(&S__advertised_for, "_advertised_for")
        || intern(&S_cluster, "cluster") || intern(&S_versions, "versions") || intern(&S_upstream_side, "upstream_side")
        || intern(&S_scope, "scope"))
        return NULL;
    MSG_HEAVY = Py_BuildValue("(s)", "heavy");
    if (MSG_HEAVY == NULL)
        return NULL;
    PyObject *lane_names[LANE_FIELDS] = {S_paused, S_cfd, S_ufd, S_deferred, S_draining, S_closed, S_cout, S_uout,
                                         S_splicing, S_conn, S_held, S_backlog, S_cmask, S_umask,
                                         S_cdec, S_udec, S_n_in, S_n_out, S_post};
    memcpy(LANE_NAMES, lane_names, sizeof lane_names);
    ONE = PyLong_FromLong(1);
    if (ONE == NULL)
        return NULL;
    return PyModule_Create(&module);
}
