"""Two elementwise problems and five kernel variants each: honest (fused), slow (tiny blocks), lazy
(half the work left to torch), broken (wrong result) and hacked (the reference's torch code).

The judge decides their rewards: on a GPU the honest kernel is the fastest and covers the device time
(profiling ratio ~1), the lazy one is correct but slower with a lower ratio, the slow one is correct
but slow, and the broken and hacked ones earn 0.
"""

from __future__ import annotations

from drkernel.types import Problem

SIZES = {"gpu": (8192, 8192), "cpu": (32, 256)}

_REFS = {
    "relu_scale": ("def forward(self, x):\n        return torch.relu(x) * 2.0 + 1.0", 1),
    "add_mul": ("def forward(self, x, y, z):\n        return (x + y) * z", 3),
}

_HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n"

_ELEMENTWISE = '''
@triton.jit
def _kernel({args}, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
{loads}
    tl.store(out_ptr + offs, {expr}, mask=m)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, {params}):
{pre}        out = torch.empty_like({first})
        n = out.numel()
        _kernel[(triton.cdiv(n, {block}),)]({call}, out, n, BLOCK={block}, num_warps={warps})
        return out
'''


def reference(name: str, size: str) -> str:
    rows, cols = SIZES[size]
    body, n_in = _REFS[name]
    inputs = ", ".join(["torch.randn(N_ROWS, N_COLS)"] * n_in)
    return (
        f"import torch\nimport torch.nn as nn\n\n# task: {name}\n\n\nclass Model(nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n\n    {body}\n\n\n"
        f"N_ROWS = {rows}\nN_COLS = {cols}\n\n\ndef get_inputs():\n    return [{inputs}]\n\n\n"
        "def get_init_inputs():\n    return []\n"
    )


def _kernel(params: list[str], expr: str, pre: str = "", block: int = 4096, warps: int = 8) -> str:
    args = ", ".join(f"{p}_ptr" for p in params)
    loads = "\n".join(f"    {p} = tl.load({p}_ptr + offs, mask=m)" for p in params)
    call = ", ".join(f"{p}.contiguous()" for p in params)
    return _HEADER + _ELEMENTWISE.format(
        args=args, loads=loads, expr=expr, params=", ".join(params) if not pre else "x",
        pre=pre, first=params[0], call=call, block=block, warps=warps,
    )


def _passthrough(name: str) -> str:
    body, _ = _REFS[name]
    return ("import torch\nimport torch.nn as nn\nimport triton  # noqa: F401\n\n\n"
            "class ModelNew(nn.Module):\n"
            f"    def __init__(self):\n        super().__init__()\n\n    {body}\n")


def variants(name: str) -> dict[str, str]:
    if name == "relu_scale":
        return {
            "honest": _kernel(["x"], "tl.maximum(x, 0.0) * 2.0 + 1.0"),
            "slow": _kernel(["x"], "tl.maximum(x, 0.0) * 2.0 + 1.0", block=32, warps=1),
            "lazy": _kernel(["h"], "h * 2.0 + 1.0", pre="        h = torch.relu(x)\n"),
            "broken": _kernel(["x"], "tl.maximum(x, 0.0) * 2.0"),
            "hacked": _passthrough(name),
        }
    return {
        "honest": _kernel(["x", "y", "z"], "(x + y) * z"),
        "slow": _kernel(["x", "y", "z"], "(x + y) * z", block=32, warps=1),
        "lazy": _lazy_add_mul(),
        "broken": _kernel(["x", "y", "z"], "x * y + z"),
        "hacked": _passthrough(name),
    }


def _lazy_add_mul() -> str:
    src = _kernel(["s", "z"], "s * z")
    src = src.replace("def forward(self, s, z):", "def forward(self, x, y, z):\n        s = x + y")
    return src


def demo_problems(size: str) -> list[Problem]:
    return [Problem(name=n, reference_code=reference(n, size)) for n in _REFS]
