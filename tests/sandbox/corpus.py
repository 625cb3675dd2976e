"""The judge's test corpora (tests/assets) and the metadata in their docstrings.

Every asset under tests/assets/{hacks,kernels,faults} starts with a docstring whose `key: value`
lines say what the judge must conclude (reference, expect, hacks, kind, options).
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

from drkernel.types import EvalOptions

ASSETS = Path(__file__).resolve().parents[1] / "assets"

# Small but not weakened: 2 correctness trials, 3 timed calls, all of them verified.
FAST = EvalOptions(num_correct_trials=2, num_perf_trials=3, num_warmup=1, timeout_s=120.0,
                   seed=None)


@dataclasses.dataclass(frozen=True)
class Asset:
    path: Path
    meta: dict[str, str]

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def code(self) -> str:
        return self.path.read_text()

    @property
    def reference(self) -> str:
        return reference_code(self.meta.get("reference", "relu_scale"))

    def options(self, base: EvalOptions = FAST) -> EvalOptions:
        return base.replace(**parse_options(self.meta.get("options", "")))

    def listed(self, key: str) -> list[str]:
        return [v.strip() for v in self.meta.get(key, "").replace("|", ",").split(",") if v.strip()]


def parse_options(text: str) -> dict[str, Any]:
    """'static_policy=False, num_perf_trials=5' -> {'static_policy': False, 'num_perf_trials': 5}."""
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, value = (s.strip() for s in part.split("=", 1))
        out[key] = ast.literal_eval(value)
    return out


def read_meta(path: Path) -> dict[str, str]:
    """The `key: value` lines of an asset's docstring (or, for a file that does not parse, its comments)."""
    text = path.read_text()
    try:
        doc = ast.get_docstring(ast.parse(text))
    except SyntaxError:
        doc = None
    if doc is None:
        doc = "\n".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    meta: dict[str, str] = {}
    key = None
    for line in doc.splitlines():
        name, sep, value = line.partition(":")
        if sep and name.isidentifier() and name == name.lower():
            key = name
            meta[key] = value.strip()
        elif key is not None and line.startswith("  "):  # continuation of the previous value
            meta[key] += " " + line.strip()
        else:
            key = None
    return meta


def corpus(kind: str) -> list[Asset]:
    return [Asset(p, read_meta(p)) for p in sorted((ASSETS / kind).glob("*.py"))]


def reference_code(name: str) -> str:
    return (ASSETS / "references" / f"{name}.py").read_text()


def asset(kind: str, name: str) -> Asset:
    path = ASSETS / kind / f"{name}.py"
    return Asset(path, read_meta(path))
