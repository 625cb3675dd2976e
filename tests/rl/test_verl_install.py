"""`pip install -e ".[verl]"` installs everything the verl integration imports (issue 34, blocker 1).

A fresh environment is simulated: a folder of links to the site-packages entries of only the
distributions that drkernel's dependencies plus its `verl` extra pull in (their requirement closure,
read from the installed metadata), and a `python -S` that sees only that folder and this checkout.
Anything the verl path imports from a distribution outside the extra is then missing, as it would be
after the real install. Skipped where verl is not installed.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

pytest.importorskip("verl")
packaging_requirements = pytest.importorskip("packaging.requirements")
packaging_utils = pytest.importorskip("packaging.utils")

ROOT = Path(__file__).resolve().parents[2]
VERL_DIR = ROOT / "drkernel" / "rl" / "verl"


def _project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _name(name: str) -> str:
    return packaging_utils.canonicalize_name(name)


def _extra_requirements(extra: str) -> list[str]:
    project = _project()
    return [*project["dependencies"], *project["optional-dependencies"][extra]]


def _closure(requirements: list[str]) -> set[str]:
    """The distributions a pip install of `requirements` brings in, per the installed metadata."""
    req_cls = packaging_requirements.Requirement
    seen: set[tuple[str, frozenset[str]]] = set()
    todo = [req_cls(r) for r in requirements]
    while todo:
        req = todo.pop()
        key = (_name(req.name), frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            continue
        for line in dist.requires or []:
            sub = req_cls(line)
            if sub.marker is None or any(sub.marker.evaluate({"extra": e}) for e in (req.extras or {""})):
                todo.append(sub)
    return {name for name, _ in seen}


def _fresh_site(tmp_path: Path, extra: str) -> Path:
    """A site folder holding only what installing drkernel[extra] would install."""
    keep = _closure(_extra_requirements(extra))
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    owner: dict[str, set[str]] = {}
    for dist in md.distributions():
        if Path(str(dist.locate_file(""))).resolve() != site:
            continue
        name = _name(dist.metadata["Name"])
        for top in {f.parts[0] for f in dist.files or [] if f.parts and f.parts[0] != ".."}:
            owner.setdefault(top, set()).add(name)
    out = tmp_path / "site"
    out.mkdir()
    for entry in site.iterdir():
        dists = owner.get(entry.name)
        if entry.suffix == ".pth" or "drkernel" in (dists or ()):
            continue  # the checkout is drkernel; .pth hooks belong to this machine's own installs
        if dists is None or dists & keep:  # files no distribution claims stay (the interpreter's own)
            (out / entry.name).symlink_to(entry)
    return out


def _run_fresh(tmp_path: Path, code: str, extra: str = "verl") -> subprocess.CompletedProcess[str]:
    site = _fresh_site(tmp_path, extra)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(site)]), PYTHONNOUSERSITE="1",
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", WANDB_MODE="disabled", VERL_USE_EXTERNAL_PLUGINS="none")
    return subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)


# verl's own chain to the agent loop and the trainer: main_ppo, the TransferQueue agent-loop worker,
# the sync v1 trainer; then the agent loop as verl's worker builds it (hydra instantiates the
# `_target_` of recipes/verl/agent_loop.yaml), and the trainer from verl's registry.
CHAIN = """
import warnings; warnings.simplefilter("ignore")
import hydra.utils, omegaconf
import verl.trainer.main_ppo, verl.trainer.ppo.v1.agent_loop_tq, verl.trainer.ppo.v1.trainer_sync
import verl.experimental.agent_loop.agent_loop as al
import drkernel.rl.verl as dv
dv.require_v1()
cfg = omegaconf.OmegaConf.load({yaml!r})[0]
cls = hydra.utils.get_class(cfg._target_)
assert issubclass(cls, al.AgentLoopBase), cls
from verl.trainer.ppo.v1.trainer_base import get_trainer_cls
print("OK", cls.__name__, get_trainer_cls("drkernel").__name__)
"""


@pytest.mark.slow
def test_the_verl_extra_imports_the_agent_loop_and_the_trainer(tmp_path):
    code = CHAIN.format(yaml=str(ROOT / "recipes" / "verl" / "agent_loop.yaml"))
    proc = _run_fresh(tmp_path, code)
    assert proc.returncode == 0 and "OK KernelAgentLoop DrKernelTrainer" in proc.stdout, (
        proc.stdout + proc.stderr[-3000:])


@pytest.mark.slow
def test_the_fresh_site_really_lacks_what_the_extra_does_not_name(tmp_path):
    """The simulation is not vacuous: without the verl extra, verl itself is not importable."""
    proc = _run_fresh(tmp_path, "import verl", extra="ray")
    assert proc.returncode != 0 and "No module named 'verl'" in proc.stderr, proc.stderr[-2000:]


def _top_level_imports(path: Path, *, module_level_only: bool) -> set[str]:
    """Absolute imports' top-level names; module_level_only skips imports inside try/if/def bodies."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = tree.body if module_level_only else list(ast.walk(tree))
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n not in {"__future__", "drkernel"}}


def _distribution_of(module: str) -> str:
    dists = md.packages_distributions().get(module)
    assert dists, f"{module} is imported but no installed distribution provides it"
    return _name(dists[0])


def test_the_extra_names_every_package_the_adapter_imports():
    named = {_name(packaging_requirements.Requirement(r).name) for r in _extra_requirements("verl")}
    imported: dict[str, set[str]] = {}
    for path in sorted(VERL_DIR.glob("*.py")):
        for module in _top_level_imports(path, module_level_only=False):
            imported.setdefault(_distribution_of(module), set()).add(f"{path.name}: {module}")
    assert {"verl", "torch", "transferqueue", "tensordict"} <= set(imported)  # the scan sees the imports
    missing = {d: sorted(w) for d, w in imported.items() if d not in named}
    assert not missing, f"pyproject's verl extra does not name {missing}"


def test_verls_agent_loop_modules_import_only_what_the_extra_installs():
    import verl

    base = Path(verl.__file__).parent
    files = [*sorted((base / "experimental" / "agent_loop").glob("*.py")),
             *sorted((base / "trainer" / "ppo" / "v1").glob("*.py")), base / "trainer" / "main_ppo.py",
             base / "workers" / "rollout" / "utils.py", base / "workers" / "rollout" / "llm_server.py"]
    keep = _closure(_extra_requirements("verl"))
    missing = {}
    for path in files:
        for module in _top_level_imports(path, module_level_only=True):
            if (dist := _distribution_of(module)) not in keep:
                missing.setdefault(dist, []).append(f"{path.relative_to(base)}: {module}")
    assert not missing, f"verl's agent-loop modules import {missing}, which the verl extra does not install"


def test_the_missing_stack_error_gives_the_command_tested_above(monkeypatch):
    import drkernel.rl.verl as dv

    monkeypatch.setattr(dv, "_V1_ERROR", ModuleNotFoundError("No module named 'uvicorn'", name="uvicorn"))
    with pytest.raises(ImportError) as err:
        dv.require_v1()
    text = str(err.value)
    assert "uvicorn" in text and text.endswith(dv.INSTALL_COMMAND)
    assert dv.INSTALL_COMMAND == "pip install -e '.[verl]'"  # the extra the fresh-site test installs
