/* The data plane's per-event steps in C: the byte path's loop only.
 * gateway/connection/plane_steps.py holds the Python references (serve_python, set_masks_python,
 * receive_python, write_queue_python) and picks these where they were built; the suite runs both
 * on the same cases (tests/unit/gateway/test_plane_steps.py, and the data plane's tests with
 * either set).  What is done with a lane's bytes stays in the DataPlane's Python methods, which
 * serve calls.
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
 * receive_python does: up to size bytes, or straight into a trusted peer's frame being assembled.
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

static PyObject *write_queue(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "write_queue(fd, out) takes 2 arguments");
        return NULL;
    }
    int fd = as_fd(args[0], "write_queue");
    if (fd < 0)
        return NULL;
    PyObject *out = args[1];
    Py_buffer views[MAX_IOV];
    struct iovec iov[MAX_IOV];
    Py_ssize_t lens[MAX_IOV];
    Py_ssize_t total = 0;
    for (;;) {
        Py_ssize_t n = PySequence_Size(out);
        if (n < 0)
            return NULL;
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
            return NULL;
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
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        total += written;
        if (drop_written(out, lens, n, written) < 0)
            return NULL;
    }
    return PyLong_FromSsize_t(total);
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
#define LANE_FIELDS 14
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
    if (deferred) {  /* after the upstream writes: off the request's latency */
        PyObject *r = call_method(lane, S_metrics, NULL, NULL);
        if (r == NULL)
            return -1;
        Py_DECREF(r);
    }
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

static PyObject *S_trusted, *S_partial_space, *S_partial_filled, *S_receive_data;

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

/* What a failed read returns: -1 (nothing there), 0 (the peer is gone), or NULL (raised). */
static PyObject *read_failed(int err)
{
    if (err == EAGAIN || err == EWOULDBLOCK)
        return PyLong_FromLong(-1);
    if (connection_error(err))
        return PyLong_FromLong(0);
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
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
    PyObject *decoder = args[1];
    int err;
    /* (only a trusted peer's decoder allocates a frame to read into: a client's never asks) */
    int trusted = attr_true(decoder, S_trusted);
    if (trusted < 0)
        return NULL;
    if (trusted) {
        PyObject *space = PyObject_CallMethodNoArgs(decoder, S_partial_space);
        if (space == NULL)
            return NULL;
        if (space != Py_None) {
            Py_buffer view;
            if (PyObject_GetBuffer(space, &view, PyBUF_WRITABLE) < 0) {
                Py_DECREF(space);
                return NULL;
            }
            if (view.len >= into_min) {
                ssize_t n = read_released(fd, view.buf, (size_t)view.len, &err);
                PyBuffer_Release(&view);
                Py_DECREF(space);
                if (n < 0)
                    return read_failed(err);
                PyObject *got = PyLong_FromSsize_t(n);
                if (got == NULL || n == 0)
                    return got;
                PyObject *r = PyObject_CallMethodOneArg(decoder, S_partial_filled, got);
                if (r == NULL) {
                    Py_DECREF(got);
                    return NULL;
                }
                Py_DECREF(r);
                return got;
            }
            PyBuffer_Release(&view);
        }
        Py_DECREF(space);
    }
    PyObject *data = PyBytes_FromStringAndSize(NULL, size);
    if (data == NULL)
        return NULL;
    ssize_t n = read_released(fd, PyBytes_AS_STRING(data), (size_t)size, &err);
    if (n <= 0) {
        Py_DECREF(data);
        return n < 0 ? read_failed(err) : PyLong_FromLong(0);
    }
    if (n != size && _PyBytes_Resize(&data, n) < 0)
        return NULL;
    PyObject *r = PyObject_CallMethodOneArg(decoder, S_receive_data, data);
    Py_DECREF(data);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    return PyLong_FromSsize_t(n);
}

static PyMethodDef methods[] = {
    {"serve", (PyCFunction)(void (*)(void))serve, METH_FASTCALL,
     "serve(plane, timeout_ms) -> events polled: one poll of the data plane and the events it returned"},
    {"receive", (PyCFunction)(void (*)(void))receive, METH_FASTCALL,
     "receive(fd, decoder, size, into_min) -> bytes read into decoder: 0 at end of stream, -1 if none"},
    {"set_masks", (PyCFunction)(void (*)(void))set_masks, METH_FASTCALL,
     "set_masks(plane, lane): register the lane's descriptors for what its state asks"},
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
        || intern(&S_trusted, "trusted") || intern(&S_partial_space, "partial_space")
        || intern(&S_partial_filled, "partial_filled") || intern(&S_receive_data, "receive_data"))
        return NULL;
    if (intern(&S_read_client, "_read_client") || intern(&S_read_upstream, "_read_upstream"))
        return NULL;
    PyObject *lane_names[LANE_FIELDS] = {S_paused, S_cfd, S_ufd, S_deferred, S_draining, S_closed, S_cout, S_uout,
                                         S_splicing, S_conn, S_held, S_backlog, S_cmask, S_umask};
    memcpy(LANE_NAMES, lane_names, sizeof lane_names);
    ONE = PyLong_FromLong(1);
    if (ONE == NULL)
        return NULL;
    return PyModule_Create(&module);
}
