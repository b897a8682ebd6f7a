"""opd._cuda.map_fd without a CUDA driver (the CPU machine): the mapping of
an exported device arena goes through libopd's one driver loader
(opd_cuda_map_export), and where there is no driver it raises BackendError
naming what is missing, never a ctypes crash; the module imports anyway.
With a driver, tests/python/test_gpu.py maps real arenas."""
import ctypes

import pytest

import opd
from opd import _cuda


def have_driver():
    try:
        ctypes.CDLL("libcuda.so.1")
        return True
    except OSError:
        return False


@pytest.mark.skipif(have_driver(), reason="a CUDA driver is here (test_gpu.py maps for real)")
def test_map_without_a_driver_names_what_is_missing():
    with pytest.raises(opd.BackendError) as e:
        _cuda.map_fd(-1, 2 << 20, 0)
    assert "needs the CUDA VMM calls of libcuda.so.1" in str(e.value)


def test_a_device_out_of_range_is_refused_before_the_driver():
    with pytest.raises(opd.OpdError) as e:
        _cuda.map_fd(-1, 2 << 20, 99)
    assert "device 99 out of 0..15" in str(e.value)
