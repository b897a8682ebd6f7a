"""pytest set-up for the torch >= 2.4 tests (the torch.compile backend):
the daemon fixtures of tests/python/conftest.py (a real daemon per
session, `c` a connection to it, `rng`), loaded from there under another
module name. Run with a python whose torch is >= 2.4 (DEVELOPERS.md:
build/venv-torch); with an older torch every test here skips."""
import importlib.util
import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "opd_python_conftest", os.path.join(_HERE, "..", "python", "conftest.py"))
_base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_base)

daemon, sock, c, rng = _base.daemon, _base.sock, _base.c, _base.rng


@pytest.fixture
def tc(c):
    """c, with torch.ops.opd.* running on it (opd.torch.register)."""
    import opd.torch as ot
    ot.register(c)
    return c


@pytest.fixture
def devs(c):
    """The devices to run torch.ops.opd.* on: the CPU, and CUDA where torch
    and the daemon both have one."""
    import torch
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() and c.devices() else [])


@pytest.fixture
def backend(c):
    """A torch.compile backend on c (opd.dynamo.Backend), with dynamo's
    caches reset before and after the test."""
    import torch
    import opd.dynamo
    torch._dynamo.reset()
    yield opd.dynamo.Backend(c)
    torch._dynamo.reset()
