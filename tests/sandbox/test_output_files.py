"""The judge opens a sandbox's output files as hostile (issue 13, class 3 and the huge-file attack).

No link is followed, no file of another owner or with a second name is read, nothing blocks on a
FIFO, and a file larger than the limit, or announcing other shapes than expected, is refused before
a byte of its data is read.
"""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest
import torch

from drkernel.sandbox.comparison import MAX_OUTPUT_BYTES, load_tensors
from drkernel.sandbox.wire.tensorfile import MAGIC, TensorFileError, read_entries, read_header, write_tensors


@pytest.fixture
def out(tmp_path: Path) -> Path:
    path = tmp_path / "trial_0.pt"
    write_tensors(str(path), [torch.arange(12, dtype=torch.float32).reshape(3, 4)])
    return path


def test_a_plain_output_file_reads(out: Path) -> None:
    (t,) = load_tensors(str(out), 1)
    assert t.shape == (3, 4) and float(t.sum()) == 66.0


def test_a_symbolic_link_is_refused_not_followed(tmp_path: Path, out: Path) -> None:
    link = tmp_path / "trial_1.pt"
    link.symlink_to(out)
    with pytest.raises(TensorFileError, match="symbolic link"):
        load_tensors(str(link), 1)
    with pytest.raises(TensorFileError, match="symbolic link"):
        read_header(str(link), 1)


def test_a_hard_link_is_refused(tmp_path: Path, out: Path) -> None:
    os.link(out, tmp_path / "trial_1.pt")
    with pytest.raises(TensorFileError, match="hard link"):
        load_tensors(str(out), 1)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "trial_1.pt"
    os.mkfifo(fifo)
    t0 = time.monotonic()
    with pytest.raises(TensorFileError, match="not a regular file"):
        load_tensors(str(fifo), 1)
    assert time.monotonic() - t0 < 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to own a file as another uid")
def test_a_file_of_another_owner_is_refused(tmp_path: Path, out: Path) -> None:
    os.chown(out, 123_456, 123_456)  # the folder stays the judge's: the file is not the writer's
    with pytest.raises(TensorFileError, match="not owned"):
        load_tensors(str(out), 1)


def _announcing(path: Path, shape: list[int], size: int) -> None:
    """A sparse file whose header announces a float32 tensor of `shape` and that is `size` bytes."""
    nbytes = 4 * int(torch.tensor(shape).prod())
    header = json.dumps({"tensors": [{"dtype": "float32", "shape": shape, "nbytes": nbytes}]}).encode()
    with open(path, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(header)) + header)
        f.truncate(size)


def test_a_file_over_the_limit_is_refused_unread(tmp_path: Path) -> None:
    """5 GiB (sparse: no disk used): refused from its size, in far less time than reading it takes."""
    big = tmp_path / "trial_0.pt"
    elems = (5 << 30) // 4
    _announcing(big, [elems], 0)
    header_len = big.stat().st_size
    _announcing(big, [elems], header_len + 4 * elems)
    t0 = time.monotonic()
    with pytest.raises(TensorFileError, match="size limit"):
        load_tensors(str(big), 1)
    assert time.monotonic() - t0 < 1
    assert 4 * elems > MAX_OUTPUT_BYTES


def test_unexpected_shapes_are_refused_before_the_data_is_read(tmp_path: Path) -> None:
    """A file within the limit but far larger than the reference's output is never loaded."""
    f = tmp_path / "trial_0.pt"
    elems = (1 << 30) // 4  # 1 GiB announced, sparse
    _announcing(f, [elems], 0)
    _announcing(f, [elems], f.stat().st_size + 4 * elems)
    t0 = time.monotonic()
    with pytest.raises(TensorFileError, match="differ from the expected"):
        load_tensors(str(f), 1, expect=[(torch.float32, [8, 256])])
    with pytest.raises(TensorFileError, match="differ from the expected"):
        load_tensors(str(f), 1, expect=[("torch.float32", [8, 256])])  # as the reference's reply spells it
    assert time.monotonic() - t0 < 1


def test_expected_shapes_that_match_read(out: Path) -> None:
    (t,) = load_tensors(str(out), 1, expect=[("torch.float32", [3, 4])])
    assert t.shape == (3, 4)


def test_read_entries_rechecks_the_file_it_opens(tmp_path: Path, out: Path) -> None:
    """The header was read from one file; a link swapped in before the data is read is refused."""
    entries = read_header(str(out), 1)
    real = tmp_path / "elsewhere.pt"
    out.rename(real)
    out.symlink_to(real)
    with pytest.raises(TensorFileError, match="symbolic link"):
        read_entries(str(out), entries)
