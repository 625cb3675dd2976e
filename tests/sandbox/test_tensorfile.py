"""The raw tensor file between sandbox and judge: exact round trips, and hostile files refused."""

from __future__ import annotations

import json
import struct
import warnings

import pytest
import torch

from drkernel.sandbox.wire.tensorfile import MAGIC, Staging, TensorFileError, read_tensors, write_tensors


def _round_trip(tmp_path, tensors, staging=None):
    path = str(tmp_path / "out.bin")
    write_tensors(path, tensors, staging)
    return read_tensors(path, len(tensors), "cpu", staging=staging)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
                                   torch.int8, torch.uint8, torch.bool, torch.complex64])
def test_round_trip_is_bit_exact(tmp_path, dtype):
    g = torch.Generator().manual_seed(0)
    x = ((torch.randn(7, 5, generator=g) * 50).to(dtype) if dtype is not torch.complex64
         else torch.randn(7, 5, dtype=dtype, generator=g))
    (y,) = _round_trip(tmp_path, [x])
    assert y.dtype == dtype and y.shape == x.shape
    assert torch.equal(y.view(-1).view(torch.uint8), x.reshape(-1).view(torch.uint8))


def test_special_values_scalars_empties_and_views_survive(tmp_path):
    nan_inf = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 1.5])
    scalar = torch.tensor(3.25)
    empty = torch.empty(0, 4)
    strided = torch.arange(24.0).reshape(4, 6).t()  # not contiguous
    out = _round_trip(tmp_path, [nan_inf, scalar, empty, strided])
    assert (torch.equal(out[0].isnan(), nan_inf.isnan())
            and torch.equal(out[0].nan_to_num(), nan_inf.nan_to_num()))
    assert torch.signbit(out[0][3])
    assert out[1].shape == () and out[1].item() == 3.25
    assert out[2].shape == (0, 4)
    assert torch.equal(out[3], strided)


def test_chunked_path_through_a_small_staging_buffer(tmp_path):
    x = torch.randn(1000, 33)
    path = str(tmp_path / "out.bin")
    write_tensors(path, [x])
    (y,) = read_tensors(path, 1, "cpu", staging=Staging(chunk_bytes=4096))
    assert torch.equal(x, y)


def _file(tmp_path, header, payload=b"", magic=MAGIC, hlen=None):
    raw = json.dumps(header).encode()
    path = tmp_path / "hostile.bin"
    path.write_bytes(magic + struct.pack("<Q", len(raw) if hlen is None else hlen) + raw + payload)
    return str(path)


@pytest.mark.parametrize("case", ["magic", "pickle", "count", "dtype", "shape_bytes", "truncated", "trailing",
                                  "header_size", "extra_key", "negative_dim", "float_dim", "not_json"])
def test_hostile_files_are_refused(tmp_path, case):
    ok = {"dtype": "float32", "shape": [2, 2], "nbytes": 16}
    if case == "magic":
        path = _file(tmp_path, {"tensors": [ok]}, b"\0" * 16, magic=b"NOTMAGIC")
    elif case == "pickle":
        path = str(tmp_path / "p.pt")
        torch.save([torch.ones(2)], path)
    elif case == "count":
        path = _file(tmp_path, {"tensors": [ok, ok]}, b"\0" * 32)
    elif case == "dtype":
        path = _file(tmp_path, {"tensors": [ok | {"dtype": "object"}]}, b"\0" * 16)
    elif case == "shape_bytes":
        path = _file(tmp_path, {"tensors": [ok | {"nbytes": 12}]}, b"\0" * 12)
    elif case == "truncated":
        path = _file(tmp_path, {"tensors": [ok]}, b"\0" * 8)
    elif case == "trailing":
        path = _file(tmp_path, {"tensors": [ok]}, b"\0" * 20)
    elif case == "header_size":
        path = _file(tmp_path, {"tensors": [ok]}, b"\0" * 16, hlen=1 << 40)
    elif case == "extra_key":
        path = _file(tmp_path, {"tensors": [ok | {"storage_offset": 4}]}, b"\0" * 16)
    elif case == "negative_dim":
        path = _file(tmp_path, {"tensors": [ok | {"shape": [-2, -2]}]}, b"\0" * 16)
    elif case == "float_dim":
        path = _file(tmp_path, {"tensors": [ok | {"shape": [2.0, 2]}]}, b"\0" * 16)
    else:
        path = str(tmp_path / "j.bin")
        with open(path, "wb") as f:
            f.write(MAGIC + struct.pack("<Q", 5) + b"{oops" + b"\0" * 16)
    with pytest.raises(TensorFileError):
        read_tensors(path, 1, "cpu")


def test_size_limit(tmp_path):
    path = str(tmp_path / "big.bin")
    write_tensors(path, [torch.zeros(1024)])
    with pytest.raises(TensorFileError):
        read_tensors(path, 1, "cpu", max_bytes=100)


def test_dtypes_off_the_list_cannot_be_written(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex32 is experimental in torch
        odd = torch.zeros(2, dtype=torch.complex32)
    with pytest.raises(TensorFileError):
        write_tensors(str(tmp_path / "q.bin"), [odd])


def test_views_with_a_storage_offset_are_written_as_what_they_show(tmp_path):
    x = torch.arange(100.0).reshape(10, 10)
    parts = [x[3:], x[:, 2], x[5, 5], torch.tensor([True, False])]
    assert all(torch.equal(a, b) for a, b in zip(parts, _round_trip(tmp_path, parts), strict=True))


def test_read_entries_reads_what_the_header_listed(tmp_path):
    from drkernel.sandbox.wire.tensorfile import read_entries, read_header

    x = torch.randn(300, 500)
    small = torch.arange(10.0)
    path = str(tmp_path / "out.bin")
    write_tensors(path, [x, small])
    entries = read_header(path, 2)
    assert [e.shape for e in entries] == [[300, 500], [10]]
    got, whole = read_entries(path, entries)
    assert torch.equal(got, x) and torch.equal(whole, small)


def test_the_file_format_needs_no_numpy(tmp_path):
    """torch does not require numpy, so neither may the judge's tensor files (issue 18)."""
    import subprocess
    import sys

    script = (
        "import sys; sys.modules['numpy'] = None\n"  # any `import numpy` now fails
        "import torch\n"
        "from drkernel.sandbox.wire.tensorfile import read_tensors, read_header, read_entries, "
        "write_tensors\n"
        f"p = {str(tmp_path / 't.bin')!r}\n"
        "ts = [torch.arange(70000, dtype=torch.float32), torch.tensor(3, dtype=torch.int8), "
        "torch.empty(0, 2)]\n"
        "write_tensors(p, ts)\n"
        "back = read_tensors(p, 3)\n"
        "assert all(torch.equal(a, b) for a, b in zip(ts, back))\n"
        "entries = read_header(p, 3)\n"
        "got = read_entries(p, entries)[0]\n"
        "assert torch.equal(got, ts[0]), got\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
