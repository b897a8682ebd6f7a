"""Running a check in a forked child (a process that inherits the parent's
Client, tensors and shared memory), for the tests of what happens after
fork()."""
import os


def in_child(check):
    """Runs check() in a forked child. True when it returned a true value;
    False when it returned a false one or raised (the child's traceback is
    printed to its stderr)."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = 0 if check() else 2
        finally:
            os._exit(code)
    return os.waitpid(pid, 0)[1] == 0
