"""Loaded by a kgw process that bench/opcodes.py starts (this folder first on its PYTHONPATH):
counts the Python bytecodes every thread but the main one executes, by function.

Threads started from now on are traced (``threading.settrace``); the main thread is traced in
the frames it enters after SIGUSR2 (Trio's loop: its long-lived frames are missed).  SIGUSR2
starts the count, SIGUSR1 writes what was counted so far to ``$KGW_OPCOUNT/<n>.json``.  Nothing
happens unless ``KGW_OPCOUNT`` names a directory."""

import os

if os.environ.get("KGW_OPCOUNT"):
    import collections
    import json
    import signal
    import sys
    import threading

    _out = os.environ["KGW_OPCOUNT"]
    _counts: collections.Counter = collections.Counter()
    _on = [False]
    _snapshots = [0]

    def _local(frame, event, arg):
        if event == "opcode" and _on[0]:
            code = frame.f_code
            _counts[(threading.current_thread().name, code.co_filename, code.co_name)] += 1
        return _local

    def _threads(frame, event, arg):
        frame.f_trace_opcodes = True
        return _local

    def _main(frame, event, arg):
        if not _on[0]:
            return None
        frame.f_trace_opcodes = True
        return _local

    def _start(signum, frame):
        _on[0] = True

    def _snapshot(signum, frame):
        _snapshots[0] += 1
        counts = dict(_counts)  # (one C call: the other threads go on counting meanwhile)
        _on[0] = False  # the snapshot's own work is not counted (nor other threads' meanwhile: between requests)
        tmp = os.path.join(_out, f".{_snapshots[0]}.json")
        with open(tmp, "w") as f:
            json.dump([[*key, n] for key, n in counts.items()], f)
        os.rename(tmp, os.path.join(_out, f"{_snapshots[0]}.json"))
        _on[0] = True

    threading.settrace(_threads)
    sys.settrace(_main)
    signal.signal(signal.SIGUSR2, _start)
    signal.signal(signal.SIGUSR1, _snapshot)
