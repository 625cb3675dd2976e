"""The public names of drkernel and of the judge's modules (httpx-style exported-members test)."""

from __future__ import annotations

import importlib

import pytest

import drkernel
from drkernel.types import EvalOutcome, EvalResult
from tests.sandbox.corpus import FAST, asset

DRKERNEL_ALL = {
    "ConfigError", "DrKernelError", "EvalOptions", "EvalOutcome", "EvalRequest", "EvalResult", "EvalStatus",
    "ExecutorError", "PolicyError", "Problem", "ProblemError", "__version__", "evaluate",
}

SANDBOX_ALL = {
    "judge": {"Judge"},
    "requestcheck": {"validate_request"},
    "pipeline": {"Evaluation", "ReferenceFailure"},
    "plumbing.process": {"SandboxFailure", "SandboxFolder", "SandboxProcess", "UidLease", "Zygote",
                         "remove_tree", "sandbox_env", "scratch_root", "sweep_stale_folders", "sweep_uid"},
    "comparison": {"Comparison", "Tolerance", "compare_outputs", "default_tolerance", "layout_issue",
                   "load_tensors"},
    "static": {"ALLOWED_IMPORT_ROOTS", "IMPORT_RULE", "MAX_CHECKED_BYTES", "POLICY", "StaticReport",
               "allowed_imports_text", "check_source", "is_policy_refusal"},
    "wire.protocol": {"MAX_MESSAGE_BYTES", "NON_FINITE", "BenchPrepare", "BenchPrepareReply", "BenchRun",
                      "BenchRunReply", "Checksums", "ChecksumsReply", "ErrorReply", "Hello", "Load",
                      "LoadReply", "Modes", "ModesReply", "OutputItem", "PaperTime", "PaperTimeReply", "Peak",
                      "PeakReply", "Profile", "ProfileReply", "ProtocolError", "REPLIES", "REQUESTS", "Reply",
                      "Request", "Run", "RunReply", "WireError", "parse_reply", "read_message",
                      "write_message"},
    "wire.helpermsg": {"AnyFloat", "CompareAnswer", "CompareJob", "CompareReply", "ForkAnswer", "ForkRequest",
                       "IsolationSpec", "WorkerArgs"},
    "cardmem": {"SLACK_BYTES", "CardWitness", "card_free", "card_identity", "oom_numbers"},
    "channel": {"COMPILE_KINDS", "Channel", "Context", "Held", "ReferenceFailure", "Stop", "Verdict",
                "Windows", "own_cap_note", "resource_shaped"},
    "inside.devicemem": {"COMPARISON_BYTES", "REFERENCE_BYTES", "TRIM_OVER", "reserve", "trim"},
    "stages.correctness": {"WEAK_REFERENCE_VARIATION", "compare_item", "launch_modes", "load",
                           "load_requests", "pair_items", "reference_hash", "static_gate", "trials"},
    "stages.timing": {"cache_key", "checksum_issue", "disturbed", "kernel_timing", "low_quartile",
                      "peak_cache_key", "per_call_ms", "reference_first", "reference_key", "reference_timing",
                      "timing_stats", "verify_checksums"},
    "stages.paper": {"PAPER_CALLS", "PAPER_FACTOR", "PAPER_METHOD", "paper_key", "paper_timing",
                     "reference_paper_times", "round_sig"},
    "stages.profiling": {"kernel_times", "profile"},
    "stages.variants": {"shape_variants"},
    "refcache": {"ReferenceTimingCache"},
    "wire.tensorfile": {"MAGIC", "Entry", "Staging", "TensorFileError", "open_output", "read_entries",
                        "read_header", "read_tensors", "write_tensors"},
    "inside.harness": {"CpuDeviceMode", "LaunchRecorder", "NotInputs", "TamperWatch", "ThreadWatch",
                       "flat_row", "flatten_outputs", "fresh_copy", "input_list", "make_inputs",
                       "on_device_first", "to_device"},
    "cli": {"kernel_line", "register", "render_verdict"},
    "plumbing.zygote": {"STATUS_FILE", "main"},
    "plumbing.tritonseed": {"BUILD_CODE", "TritonSeed", "copy_seed"},
    "plumbing.isolation": {"IsolationError", "enter", "install_seccomp", "needed_paths", "new_pid_namespace",
                           "package_folder", "probe", "seccomp_available", "seccomp_program"},
}


def test_drkernel_exports() -> None:
    assert set(drkernel.__all__) == DRKERNEL_ALL
    for name in drkernel.__all__:
        assert hasattr(drkernel, name), name


@pytest.mark.parametrize("module", sorted(SANDBOX_ALL))
def test_sandbox_module_exports(module: str) -> None:
    mod = importlib.import_module(f"drkernel.sandbox.{module}")
    assert set(mod.__all__) == SANDBOX_ALL[module]
    for name in mod.__all__:
        assert hasattr(mod, name), f"{module}.{name}"


def test_worker_declares_its_public_names() -> None:
    mod = importlib.import_module("drkernel.sandbox.inside.worker")
    assert {"Sandbox", "serve", "main"} <= set(mod.__all__)


def test_every_judge_module_starts_with_a_contract_docstring() -> None:
    for module in [*SANDBOX_ALL, "inside.worker", "inside.trialwork", "inside.timingwork",
                   "inside.profilework", "inside.sealedwork", "inside.failure", "inside.peak",
                   "wire.sharedmem", "inside", "wire", "plumbing", "stages"]:
        doc = importlib.import_module(f"drkernel.sandbox.{module}").__doc__
        assert doc and len(doc.strip().splitlines()) >= 1, module


def test_top_level_evaluate_judges_one_candidate() -> None:
    kernel = asset("kernels", "relu_scale")
    result = drkernel.evaluate(kernel.reference, kernel.code, FAST)
    assert isinstance(result, EvalResult)
    assert result.outcome is EvalOutcome.OK and result.reward > 0
