"""The one dtype table and the one shape grammar: what they accept, what they refuse and why, and
that nothing else in the source declares a dtype table of its own."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from formloop.dtypes import DTYPES, KERNEL_DTYPES, dtype_bytes, dtype_of_torch, get_dtype, torch_dtype
from formloop.errors import InvalidInput
from formloop.workload import (MAX_EXTENT, TILING_STUDY, WorkloadSpec, as_workload, parse_shape, parse_sizes,
                               parse_workload, split_shape)

SRC = Path(__file__).resolve().parents[1] / "src" / "formloop"


@pytest.mark.parametrize("row", DTYPES, ids=[d.name for d in DTYPES])
def test_bytes_are_what_torch_stores(row):
    """Independent of the table: torch's own element size for the storage type."""
    assert torch.empty(0, dtype=torch_dtype(row.name)).element_size() == row.bytes
    if row.storage:
        assert dtype_of_torch(torch_dtype(row.name)) is row


def test_aliases_and_refusals():
    assert get_dtype("torch.bfloat16").name == "bf16" and get_dtype("HALF").name == "fp16"
    assert get_dtype("float8_e5m2").name == "fp8e5m2" and dtype_bytes("float8_e5m2") == 1
    with pytest.raises(InvalidInput, match="invalid dtype: 'int3'; allowed: bf16, fp16, fp32, tf32"):
        get_dtype("int3", KERNEL_DTYPES)
    with pytest.raises(InvalidInput, match="allowed: bf16, fp16, fp32, tf32"):
        get_dtype("fp8", KERNEL_DTYPES)  # known, but no kernel takes it
    with pytest.raises(InvalidInput, match="torch dtype"):
        dtype_of_torch(torch.int32)


def test_every_reader_sees_the_table():
    from formloop.library import gemm_tiling
    from formloop.library.gemm_tiling_kernel import PRECISION, TOLERANCE, TORCH_DTYPES
    from formloop.measure.compare import TOLERANCES
    from formloop.sol import sol_report

    assert set(KERNEL_DTYPES) == {"fp32", "tf32", "tf32x3", "bf16", "fp16"}
    assert gemm_tiling.DTYPE_BYTES == {d: get_dtype(d).bytes for d in KERNEL_DTYPES}
    assert PRECISION == {"fp32": "ieee", "tf32": "tf32", "tf32x3": "tf32x3", "bf16": "ieee", "fp16": "ieee"}
    assert TOLERANCE == {"fp32": 1e-4, "tf32": 2e-3, "tf32x3": 1e-4, "bf16": 1e-2, "fp16": 2e-3}
    assert TORCH_DTYPES["tf32"] is torch.float32 and TORCH_DTYPES["bf16"] is torch.bfloat16
    assert TOLERANCES[torch.float32].rtol == 2e-3 and TOLERANCES[torch.float8_e5m2].rtol == 0.25
    # bytes of a 2x2x2 GEMM: 3 matrices of 4 elements
    assert sol_report("gemm", (2, 2, 2), "float8_e5m2", "h100").bytes == 12
    assert sol_report("gemm", (2, 2, 2), "bf16", "h100").bytes == 24


def test_no_module_declares_its_own_dtype_table():
    """A dict literal keyed by dtype names with byte sizes, torch dtypes or tolerances as values
    belongs in formloop/dtypes.py only."""
    names = "|".join(d.name for d in DTYPES)
    table = re.compile(rf"""["']({names})["']\s*:\s*(torch\.\w+|[1248]\s*[,}}]|\d(\.\d+)?e-\d)""")
    offenders = [f"{p.relative_to(SRC)}:{n}" for p in SRC.rglob("*.py") if p.name != "dtypes.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1) if table.search(line)]
    assert offenders == []


def test_shape_grammar():
    axes = ("M", "N", "K")
    assert parse_shape("64,32,16", axes) == {"M": 64, "N": 32, "K": 16}
    assert parse_shape("K=16, M=64 ,N=32", axes) == {"M": 64, "N": 32, "K": 16}
    assert parse_shape("64,K=16,N=32", axes) == {"M": 64, "N": 32, "K": 16}
    assert split_shape("64,256,act=gelu", ("M", "N", "K", "act")) == {"M": "64", "N": "256", "act": "gelu"}
    assert parse_shape(f"{MAX_EXTENT},1,1", axes)["M"] == 2**31 - 1
    assert parse_sizes("3,4", field="shapes") == (3, 4)


@pytest.mark.parametrize("text, field", [
    ("0,1,1", "shape M"), (f"{2**31},1,1", "shape M"), ("1,-3,1", "shape N"), ("1,1,2.5", "shape K"),
    ("１２,1,1", "shape M"), ("٣,1,1", "shape M"), ("²,1,1", "shape M"), ("1_000,1,1", "shape M"),
    ("1,1", "shape"), ("1,1,1,1", "shape"), ("M=1,1,1", "shape"), ("M=1,M=2,K=3", "shape"), ("M=1,N=2,Q=3", "shape"),
    ("", "shape"), ("1,,1", "shape N"), ("1 2,1,1", "shape M"),
])
def test_bad_shapes_name_the_field_and_the_bounds(text, field):
    with pytest.raises(InvalidInput) as info:
        parse_shape(text, ("M", "N", "K"))
    assert info.value.field == field
    if field != "shape":
        assert "2147483647 (2^31-1)" in str(info.value)


def test_workloads():
    assert parse_workload("gemm", "64,32,16").params == {"M": 64, "N": 32, "K": 16, "e": 4}
    spec = WorkloadSpec("gemm", {"M": 1, "N": 2, "K": 3}, "float16")
    assert spec.dtype == "fp16" and spec.key == "gemm fp16 M=1 N=2 K=3" and spec.params["e"] == 2
    assert as_workload("gemm", {"K": 3, "M": 1, "N": 2}) == as_workload("gemm", (1, 2, 3)) == as_workload("gemm", "1,2,3")
    assert parse_workload("rmsnorm", "R=4,D=8").shape == {"R": 4, "D": 8}
    assert [w.label for w in TILING_STUDY] == ["gemm 4096x4096x4096 fp32", "gemm 64x4096x4096 fp32",
                                               "gemm 1000x1000x1000 fp32"]
    with pytest.raises(InvalidInput, match="shape M"):
        WorkloadSpec("gemm", {"M": 2**31, "N": 1, "K": 1})
    with pytest.raises(InvalidInput, match="shape M"):
        WorkloadSpec("gemm", {"M": True, "N": 1, "K": 1})
    with pytest.raises(InvalidInput, match="named extents"):
        parse_workload("rmsnorm", "4,8")
