/* The data plane's writes in C: the byte path only.  gateway/connection/writes.py holds the
 * Python reference (write_queue_python) and picks this one where it was built; the suite runs
 * both on the same cases (tests/unit/gateway/test_writes.py).
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
#include <errno.h>
#include <limits.h>
#include <sys/uio.h>

#define MAX_IOV 128

static PyObject *S_popleft;

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
    long fd_long = PyLong_AsLong(args[0]);
    if (fd_long == -1 && PyErr_Occurred())
        return NULL;
    if (fd_long < 0 || fd_long > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "write_queue: fd out of range");
        return NULL;
    }
    int fd = (int)fd_long;
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

static PyMethodDef methods[] = {
    {"write_queue", (PyCFunction)(void (*)(void))write_queue, METH_FASTCALL,
     "write_queue(fd, out) -> bytes written: out's chunks until it is empty or fd would block"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gateway.connection._writes", "The data plane's writes in C (see gateway/connection/writes.py)",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__writes(void)
{
    S_popleft = PyUnicode_InternFromString("popleft");
    if (S_popleft == NULL)
        return NULL;
    return PyModule_Create(&module);
}
