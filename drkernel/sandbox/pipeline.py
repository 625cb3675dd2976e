"""One evaluation: static gate -> load -> correctness -> launch modes -> timing -> profile -> reward.

Drives a candidate sandbox and the reference sandbox through their ops, compares outputs itself,
and turns every finding into the EvalResult. Failures of the candidate are data; failures of the
reference side raise ReferenceFailure for the judge to report as infra_error.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import statistics
import time
from typing import Any

import torch

from drkernel.reward.speedup import REWARD_PRESETS, turn_reward
from drkernel.sandbox.comparator import LocalComparator, ProcessComparator
from drkernel.sandbox.devicelock import timing_lock
from drkernel.sandbox.process import SandboxFailure, SandboxProcess
from drkernel.sandbox.refcache import ReferenceTimingCache
from drkernel.sandbox.static import check_source
from drkernel.sandbox.tensorfile import Entry, SamplePlan
from drkernel.types import (
    DeviceInfo,
    ErrorInfo,
    EvalOutcome,
    EvalRequest,
    EvalResult,
    KernelTime,
    SpeedOfLight,
    TimingStats,
    TrialReport,
)  # fmt: skip

__all__ = ["Evaluation", "ReferenceFailure"]

_COMPILE_KINDS = {"syntax_error", "import_error", "missing_model_new", "triton_compile_error"}


class ReferenceFailure(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


WEAK_REFERENCE_VARIATION = 1e-2  # as the audit's low_variation flag


class _Stop(Exception):
    """Ends the pipeline early with the result built so far."""


class _VariantNotCounted(Exception):
    """A held-out shape that the reference itself cannot run."""


def timing_stats(event_ms: list[float], host_ms: list[float] | None = None) -> TimingStats:
    return TimingStats(
        median_ms=statistics.median(event_ms),
        mean_ms=statistics.fmean(event_ms),
        std_ms=statistics.pstdev(event_ms) if len(event_ms) > 1 else 0.0,
        min_ms=min(event_ms),
        max_ms=max(event_ms),
        n=len(event_ms),
        host_median_ms=statistics.median(host_ms) if host_ms else None,
    )


class Evaluation:
    def __init__(self, request: EvalRequest, cand: SandboxProcess, ref: SandboxProcess,
                 cache: ReferenceTimingCache, device: DeviceInfo,
                 comparator: LocalComparator | ProcessComparator | None = None,
                 judge_device: str = "cpu") -> None:  # fmt: skip
        self.req = request
        self.opts = request.options
        self.cand, self.ref, self.cache = cand, ref, cache
        self.cuda = device.kind == "cuda"
        self.device = judge_device  # "cuda:N" on a GPU judge: names the device lock
        self.comparator = comparator or LocalComparator("cpu")
        self.deadline = time.monotonic() + self.opts.timeout_s
        self.rng = random.Random(self.opts.seed) if self.opts.seed is not None else random.SystemRandom()
        self.init_seed = self.rng.randrange(1 << 31)
        self.seeds = [self.rng.randrange(1 << 31) for _ in range(self.opts.num_correct_trials)]
        self.result = EvalResult(outcome=EvalOutcome.OK, device=device, task_id=request.task_id)
        self.timed_launches_per_call: float | None = None
        self.output_bytes: int | None = None  # of one call's outputs, from the reference's trial files
        self.problem_flops: float | None = None  # a module-level FLOPS of the reference, where it states one
        self.variant_index: int | None = None  # set while a held-out shape is checked

    # -- plumbing -------------------------------------------------------------------------------
    def _cand(self, msg: dict[str, Any]) -> dict[str, Any]:
        return self._cand_reply(self.cand.request(msg, self.deadline))

    def _cand_reply(self, reply: dict[str, Any]) -> dict[str, Any]:
        """Check a candidate reply; a failure ends the pipeline with the matching outcome."""
        self._account("sandbox", reply)
        self._check_reply_flags(reply)
        if not reply.get("ok"):
            err = reply.get("error") or {}
            kind = str(err.get("kind", "forward_error"))
            if kind == "reference_error":
                raise ReferenceFailure(kind, str(err.get("message")))
            outcome = EvalOutcome.COMPILE_ERROR if kind in _COMPILE_KINDS else EvalOutcome.RUNTIME_ERROR
            self._finish(outcome, ErrorInfo(kind, str(err.get("message", ""))[:4000], err.get("traceback")))
        return reply

    def _ref(self, msg: dict[str, Any]) -> dict[str, Any]:
        self.ref.send(msg)
        return self._ref_receive()

    def _ref_receive(self) -> dict[str, Any]:
        try:
            reply = self.ref.receive(self.deadline)
        except SandboxFailure as exc:
            raise ReferenceFailure(f"reference_{exc.kind}", exc.message) from None
        self._account("reference", reply)
        if not reply.get("ok"):
            err = reply.get("error") or {}
            kind = str(err.get("kind", "reference_error"))
            raise ReferenceFailure(kind if kind == "unsupported_dtype" else "reference_error",
                                   str(err.get("message", "reference failed")))  # fmt: skip
        return reply

    def _both(self, ref_msg: dict[str, Any], cand_msg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Run an op in both sandboxes concurrently."""
        self.ref.send(ref_msg)
        self.cand.send(cand_msg)
        ref_reply = self._ref_receive()
        return ref_reply, self._cand_reply(self.cand.receive(self.deadline))

    def _account(self, who: str, reply: dict[str, Any]) -> None:
        op_s = reply.get("op_s")
        if isinstance(op_s, (int, float)):
            self.result.stage_s[who] = round(self.result.stage_s.get(who, 0.0) + float(op_s), 4)

    def _hack(self, code: str, evidence: str) -> None:
        if self.variant_index is not None:  # a hack is a hack wherever it is seen; say where, for humans
            evidence = f"held-out shape {self.variant_index + 1}: {evidence}"
        if code not in self.result.hacks:
            self.result.hacks.append(code)
            self.result.hack_details[code] = evidence

    def _check_reply_flags(self, reply: dict[str, Any]) -> None:
        tampered = reply.get("tampered") or []
        if tampered:
            self._hack("monkeypatch", "replaced at run time: " + ", ".join(map(str, tampered[:8])))
        if int(reply.get("threads") or 0) > 0:
            self._hack("async_thread", f"{reply['threads']} thread(s) left running by the submission")

    def _finish(self, outcome: EvalOutcome, error: ErrorInfo | None = None) -> None:
        self.result.outcome = outcome
        self.result.error = error
        raise _Stop

    # -- steps ----------------------------------------------------------------------------------
    def run(self) -> EvalResult:
        steps = (self._static, self._load, self._correctness, self._launch_modes, self._stop_if_failed,
                 self._timing, self._profile, self._stop_if_failed, self._shape_variants, self._reward)  # fmt: skip
        try:
            for step in steps:
                t0 = time.monotonic()
                step()
                name = step.__name__.strip("_")
                self.result.stage_s[name] = round(self.result.stage_s.get(name, 0.0) + time.monotonic() - t0, 4)
        except _Stop:
            pass
        if self.result.hacks:
            self.result.outcome = EvalOutcome.HACK_DETECTED
        if self.result.outcome is not EvalOutcome.OK:
            self.result.correct = False
            self.result.reward = 0.0
        return self.result

    def _static(self) -> None:
        report = check_source(self.req.kernel_code, self.opts.entry_point, self.opts.static_policy)
        if report.syntax_error:
            self._finish(EvalOutcome.COMPILE_ERROR, ErrorInfo("syntax_error", report.syntax_error))
        if not report.has_model_new:
            msg = f"the submission defines no class {self.opts.entry_point}New"
            self._finish(EvalOutcome.COMPILE_ERROR, ErrorInfo("missing_model_new", msg))
        self.result.compiled = True
        for code, evidence in report.hacks.items():
            self._hack(code, f"static: {evidence}")
        if self.result.hacks:
            raise _Stop

    def _load(self) -> None:
        ref_reply, _ = self._both(*self._load_messages(""))
        self.problem_flops = ref_reply.get("flops")

    def _load_messages(self, snippet: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The load op for the reference and for the candidate, at the sizes `snippet` sets. The
        submission file is (re)written each time: it sits in the submission's own folder."""
        path = os.path.join(self.cand.workdir, "submission.py")
        with open(path, "w") as f:
            f.write(self.req.kernel_code)
        common = {"op": "load", "reference_code": self.req.reference_code, "size_snippet": snippet,
                  "reference_hash": _hash(self.req.reference_code), "init_seed": self.init_seed,
                  "entry_point": self.opts.entry_point}  # fmt: skip
        return common, common | {"candidate_path": path}

    def _run_pair(self, items: list[tuple[int, float]], tag: str) -> tuple[dict[str, Any], dict[str, Any]]:
        msg = {"op": "run", "items": items, "tag": tag}
        return self._both(msg, msg)

    def _compare_item(self, ref_item: dict[str, Any], item: dict[str, Any], seed: int,
                      sample: tuple[list[Entry], list[SamplePlan | None]] | None = None,
                      prints: list[torch.Tensor] | None = None) -> TrialReport:  # fmt: skip
        """Compare one output pair; `sample`: the candidate file's header and the plans drawn for it."""
        for evidence in item.get("subclass") or []:
            self._hack("tensor_subclass", evidence)
        if item.get("aliases_input") and not ref_item.get("aliases_input"):
            self._hack("output_aliases_input", "an output shares storage with an input")
        if item.get("aliases_previous") and not ref_item.get("aliases_previous"):
            self._hack("output_aliases_previous", "an output shares storage with the previous call's output")
        if item.get("aliases_param") and not ref_item.get("aliases_param"):
            self._hack("output_aliases_parameter", "an output shares storage with a parameter")
        if item.get("mutated_input") and not ref_item.get("mutated_input"):
            self._hack("input_mutation", "the submission modified its inputs in place")
        if int(item.get("threads") or 0) > 0:
            self._hack("async_thread", f"{item['threads']} thread(s) of the submission alive after forward returned")
        ref_path = os.path.join(self.ref.workdir, str(ref_item.get("file")))
        out_path = os.path.join(self.cand.workdir, str(item.get("file")))
        job: dict[str, Any] = {
            "ref": [ref_path, len(ref_item["dtypes"])], "out": [out_path, len(item.get("dtypes") or [])],
            "sample": None, "structure": [ref_item["structure"], item.get("structure")],
            "atol": self.opts.atol, "rtol": self.opts.rtol, "relative": self.opts.check_relative_error,
            "fingerprint": prints is not None,
        }  # fmt: skip
        if sample is not None:
            entries, plans = sample
            job["sample"] = {"shapes": ref_item.get("shapes"), "sampled": list(ref_item.get("sampled") or []),
                             "plans": [p.to_json() if p is not None else None for p in plans]}  # fmt: skip
        try:
            c = self.comparator.compare(job)
        finally:  # outputs of GPU-sized problems are large: keep at most one pair on disk
            for path in (ref_path, out_path):
                with contextlib.suppress(OSError):
                    os.remove(path)
        if prints is not None and c.get("fingerprint") is not None:
            prints.append(torch.tensor(c["fingerprint"], dtype=torch.float64))
        return TrialReport(seed, bool(c["passed"]), c["max_abs_diff"], c["max_rel_diff"], c["rel_l2"], c["issue"])

    def _correctness(self) -> None:
        items = [(s, 1.0) for s in self.seeds]
        ref_reply, reply = self._run_pair(items, "trial")
        first = reply["items"][0].get("forward_s") if reply.get("items") else None
        if isinstance(first, (int, float)):  # the candidate's JIT compile (or cache load) is in here
            self.result.stage_s["first_call"] = round(float(first), 4)
        prints: list[torch.Tensor] = []
        self.output_bytes = _output_bytes(ref_reply["items"][0]) if ref_reply.get("items") else None
        for seed, ref_item, item in zip(self.seeds, ref_reply["items"], reply["items"], strict=True):
            self.result.trials.append(self._compare_item(ref_item, item, seed, prints=prints))
            self.result.launched_kernels.extend(n for n in item["launches"] if n not in self.result.launched_kernels)
            if not item["launches"]:
                self._hack("decoy_kernel", f"trial with seed {seed} launched no Triton kernel of the submission")
        self._weak_reference(prints)
        if not all(t.passed for t in self.result.trials):
            self.result.outcome = EvalOutcome.INCORRECT

    def _weak_reference(self, prints: list[torch.Tensor]) -> None:
        """Warn when the reference's outputs barely change between the trials' random inputs: there,
        a kernel that returns one stored output passes every check (KernelBench issue #165)."""
        if len(prints) < 2 or any(p.numel() != prints[0].numel() for p in prints):
            return
        base = prints[0]
        norm = float(base.norm())
        spread = max(float((p - base).norm()) for p in prints[1:])
        if norm == 0.0 and spread == 0.0:
            self.result.warnings.append("weak_reference: the reference output is all zeros on every trial's inputs; "
                                        "an all-zeros kernel is correct here")  # fmt: skip
        elif norm > 0.0 and spread / norm < WEAK_REFERENCE_VARIATION:
            self.result.warnings.append(
                f"weak_reference: the reference output changes by at most {spread / norm:.2e} (relative L2) "
                f"between the {len(prints)} trials' random inputs; a kernel that ignores its inputs would pass")

    def _launch_modes(self) -> None:
        if self.result.outcome is not EvalOutcome.OK or self.result.hacks:
            return
        reply = self._cand({"op": "modes", "seed": self.seeds[0]})
        missing = [mode for mode, n in reply["modes"].items() if n == 0]
        if missing:
            self._hack("decoy_kernel", "no successful launch of a submission kernel in: " + ", ".join(missing))

    def _stop_if_failed(self) -> None:
        if self.result.hacks or self.result.outcome is not EvalOutcome.OK:
            raise _Stop

    # -- timing ---------------------------------------------------------------------------------
    # Candidate and reference are timed the same way: windows of calls, each call on fresh inputs
    # (a fresh seed, drawn now, on the device), replayed as one CUDA graph where the forward can be
    # captured, device time per call = window time / calls. Nothing of it is taken on the
    # candidate's word: every timed output is checksummed against the reference's, and the judge's
    # own clock around the timed op bounds the device time the sandbox may report.
    def _timing(self) -> None:
        ref = self._reference_timing()
        calls, windows = int(ref.window_calls or 1), int(ref.windows or 1)
        seeds, wseeds = self._fresh(windows, calls), self._fresh(windows, calls)
        with timing_lock(self.device):  # the device to itself: one timing window per GPU, host-wide
            prep = self._cand({"op": "bench_prepare", "seed": self.rng.randrange(1 << 30), "calls": calls,
                               "warmup": self.opts.num_warmup, "warmup_s": self._warmup_s, "graph": self.cuda})  # fmt: skip
            t0 = time.perf_counter()
            reply = self._cand({"op": "bench_run", "seeds": seeds, "wseeds": wseeds})
            external_ms = (time.perf_counter() - t0) * 1e3
        if any(n == 0 for n in reply["launches"]):
            self._hack("decoy_kernel", "a timed window launched no Triton kernel of the submission")
        self.timed_launches_per_call = statistics.median(reply["launches"]) / calls
        per_call = [w / calls for w in reply["window_ms"]]
        host_per_call = [h / calls for h in reply["host_ms"]]
        stats = timing_stats(per_call, host_per_call)
        stats.window_calls, stats.windows, stats.graph = calls, windows, bool(reply.get("graph"))
        stats.external_ms_per_call = external_ms / (calls * windows)
        stats.overhead_ms = max(external_ms - sum(reply["window_ms"]), 0.0)
        stats.graph_submit_ms = _number(prep.get("launch_ms"))
        self.result.kernel_timing = stats
        self._stream_check(reply["window_ms"], reply["host_ms"])
        self._verify_checksums(seeds, wseeds, reply["checksums"], "timed window")
        self._stop_if_failed()
        self._external_clock(reply["window_ms"], external_ms, ref)
        self.result.reference_ms = ref.median_ms
        self.result.kernel_ms = stats.median_ms
        self.result.speedup = ref.median_ms / stats.median_ms if stats.median_ms > 0 else None
        self._speed_of_light(ref, stats)

    def _speed_of_light(self, ref: TimingStats, kernel: TimingStats) -> None:
        """Achieved bandwidth against the device's measured peak; a time the physics forbids is a hack."""
        if not self.cuda or ref.input_bytes is None or self.output_bytes is None:
            return
        peak = self._peaks()
        bw = peak.get("bandwidth_gbs")
        min_bytes = int(ref.input_bytes) + int(self.output_bytes)
        sol = SpeedOfLight(min_bytes=min_bytes)

        def gbs(ms: float) -> float | None:
            return min_bytes / (ms * 1e6) if ms > 0 else None

        sol.kernel_gbs, sol.reference_gbs = gbs(kernel.median_ms), gbs(ref.median_ms)
        if bw:
            sol.kernel_bandwidth_fraction = sol.kernel_gbs / bw if sol.kernel_gbs else None
            sol.reference_bandwidth_fraction = sol.reference_gbs / bw if sol.reference_gbs else None
        flops = self.problem_flops
        if isinstance(flops, (int, float)) and flops > 0:
            sol.flops = float(flops)
            sol.kernel_tflops = flops / (kernel.median_ms * 1e9) if kernel.median_ms > 0 else None
            sol.reference_tflops = flops / (ref.median_ms * 1e9) if ref.median_ms > 0 else None
        self.result.speed_of_light = sol
        # 1.1 x the measured peak: past it, the time is not the device's (a timing hack, or broken timing)
        if bw and sol.kernel_bandwidth_fraction is not None and sol.kernel_bandwidth_fraction > 1.1 and min_bytes > (
                64 << 20):  # past the L2 (60 MB on an H200): a smaller working set may run from the cache
            self._hack("faster_than_light", f"timed at {sol.kernel_gbs:.0f} GB/s for its {min_bytes} bytes, "
                       f"above the device's measured {bw:.0f} GB/s")  # fmt: skip

    def _peaks(self) -> dict[str, Any]:
        info = self.ref.info or {}
        key = self.cache.key("peak", str(info.get("device_name")), "device", str(info.get("torch")), 0, 0,
                             method="peak-v1")  # fmt: skip
        peaks = self.cache.get_json(key)
        if not isinstance(peaks, dict):
            with timing_lock(self.device):
                reply = self._ref({"op": "peak"})
            peaks = {k: reply.get(k) for k in ("bandwidth_gbs", "tflops_fp32", "tflops_bf16")}
            self.cache.put_json(key, peaks)
        dev = self.result.device
        if dev is not None:
            dev.peak_bandwidth_gbs = peaks["bandwidth_gbs"]
            dev.peak_tflops_fp32 = peaks["tflops_fp32"]
            dev.peak_tflops_bf16 = peaks["tflops_bf16"]
        return peaks

    def _fresh(self, rows: int, cols: int) -> list[list[int]]:
        return [[self.rng.randrange(1 << 30) for _ in range(cols)] for _ in range(rows)]

    @property
    def _warmup_s(self) -> float:
        return 0.1 if self.cuda else 0.0  # GPU clocks ramp up: warm up for time, not just calls

    def _stream_check(self, window_ms: list[float], host_ms: list[float]) -> None:
        """Work outside the timed stream shows as host time (device-wide sync) far above event time."""
        if not self.cuda:
            return
        event = statistics.median(window_ms)
        gap = statistics.median(h - e for h, e in zip(host_ms, window_ms, strict=True))
        if gap > 0.2 + 0.5 * event:
            self._hack("timing_evasion", "the device stayed busy well past the timed stream: work ran outside it")

    def _verify_checksums(self, seeds: list[list[int]], wseeds: list[list[int]], got: Any, where: str) -> None:
        """Every timed output against the reference's checksum of the same inputs."""
        want = self._ref({"op": "checksums", "seeds": seeds, "wseeds": wseeds})["checksums"]
        if not isinstance(got, list) or len(got) != len(want):
            self._hack("replayed_output", f"the {where} returned no checksum for some calls")
            return
        slack = max((t.rel_l2 or 0.0) for t in self.result.trials) if self.result.trials else 0.0
        for r, (want_row, got_row) in enumerate(zip(want, got, strict=True)):
            if not isinstance(got_row, list) or len(got_row) != len(want_row):
                self._hack("replayed_output", f"the {where} returned no checksum for some calls")
                return
            for c, (w, g) in enumerate(zip(want_row, got_row, strict=True)):
                issue = checksum_issue(w, g, slack)
                if issue is not None:
                    self._hack("replayed_output", f"{where} {r}, call {c}: {issue}")
                    return

    def _external_clock(self, window_ms: list[float], external_ms: float, ref: TimingStats) -> None:
        """The judge's clock around the timed op bounds what the sandbox may report. Besides the windows
        the op fills inputs and checksums outputs, which cost the reference `ref.overhead_ms` for the
        same calls; an honest sandbox spends about as much. (Where those costs dwarf the windows, as for
        a few-microsecond kernel, the bound is loose: docs/errors.md, threat model.)"""
        overhead = float(ref.overhead_ms or 0.0)
        if self.cuda:  # 306_TransformerBlock's honest op once ran ~50 ms past the reference's overhead
            floor = 0.8 * (external_ms - 2.0 * overhead - 20.0)
        else:  # the interpreter and a shared CPU: only gross forgeries
            floor = 0.5 * (external_ms - 1.5 * overhead - 100.0)
        if sum(window_ms) < floor:
            self._hack("timer_mismatch", f"the sandbox reported {sum(window_ms):.3f} ms of timed windows; the "
                       f"judge's own clock allows no less than {floor:.3f} ms")  # fmt: skip

    def _reference_timing(self) -> TimingStats:
        info = self.ref.info or {}
        backend = self.opts.reference_backend
        total = self.opts.num_perf_trials or (100 if self.cuda else 3)
        key = self.cache.key(_hash(self.req.reference_code), str(info.get("device_name")), backend,
                             str(info.get("torch")), total, self.opts.num_warmup, 0.0, method="windows-v3")  # fmt: skip
        stats = self.cache.get(key)
        if stats is None:
            with timing_lock(self.device):
                prep = self._ref({"op": "bench_prepare", "seed": self.rng.randrange(1 << 30), "calls": None,
                                  "warmup": self.opts.num_warmup, "warmup_s": self._warmup_s, "graph": self.cuda,
                                  "compile": backend == "compile", "window_ms": 1.0})  # fmt: skip
                calls = int(prep["calls"])
                # enough windows for the number of timed calls asked, and on a GPU for ~20 ms of
                # device time (small kernels: a steadier median); 5 to 30 windows
                est = float(prep.get("est_ms") or 0.0)
                budget = math.ceil(20.0 / max(calls * est, 1e-3)) if self.cuda else 1
                windows = min(max(5 if self.cuda else 1, math.ceil(total / calls), budget), 30 if self.cuda else 100)
                seeds, wseeds = self._fresh(windows, calls), self._fresh(windows, calls)
                t0 = time.perf_counter()
                reply = self._ref({"op": "bench_run", "seeds": seeds, "wseeds": wseeds})
                external_ms = (time.perf_counter() - t0) * 1e3
            stats = timing_stats([w / calls for w in reply["window_ms"]], [h / calls for h in reply["host_ms"]])
            stats.window_calls, stats.windows, stats.graph = calls, windows, bool(reply.get("graph"))
            stats.external_ms_per_call = external_ms / (calls * windows)
            stats.overhead_ms = max(external_ms - sum(reply["window_ms"]), 0.0)
            stats.input_bytes = prep.get("input_bytes")
            stats.graph_submit_ms = _number(prep.get("launch_ms"))
            self.cache.put(key, stats)
        self.result.reference_timing = stats
        return stats

    def _profile(self) -> None:
        if not (self.cuda and self.opts.profile):
            return
        n = self.opts.num_profile_calls
        seeds, wseeds = self._fresh(1, n), self._fresh(1, n)
        with timing_lock(self.device):
            reply = self._cand({"op": "profile", "seeds": seeds[0], "wseeds": wseeds[0]})
        self._verify_checksums(seeds, wseeds, [reply.get("checksums")], "profiled window")
        own = set(reply.get("launches") or [])
        kernels = [KernelTime(name=str(k)[:200], device_us=float(v[0]), calls=int(v[1]), own=str(k) in own)
                   for k, v in (reply.get("kernels") or {}).items()]  # fmt: skip
        kernels.sort(key=lambda k: -k.device_us)
        total = sum(k.device_us for k in kernels)
        self.result.kernels = kernels[:10]
        self.result.coverage = (sum(k.device_us for k in kernels if k.own) / total) if total > 0 else None
        per_call = len(reply.get("launches") or []) / max(n, 1)
        if self.timed_launches_per_call is not None and self.result.kernel_timing is not None:
            if per_call != self.timed_launches_per_call:
                self._hack("observer_dependent", f"{per_call:g} submission launches per call under the profiler, "
                           f"{self.timed_launches_per_call:g} in timed calls")  # fmt: skip
            kt = self.result.kernel_timing
            profiled_ms = total / 1e3 / max(n, 1)
            if kt.median_ms > 0.05 and profiled_ms < 0.25 * kt.median_ms:
                self._hack("observer_dependent", f"under the profiler the device worked {profiled_ms:.4f} ms per "
                           f"call, {kt.median_ms:.4f} ms in the timed windows")  # fmt: skip

    def _shape_variants(self) -> None:
        """Correctness on held-out shapes, after the verdict: a failure here is counted, never fatal.

        A variant on which the reference itself fails is not counted (the problem's fault). A candidate
        that fails on a variant (an error, a crash, a hang) fails that variant; a dead sandbox fails the
        variants after it too. Hack checks of these runs still apply.
        """
        if not self.req.shape_variants:
            return
        passed = checked = 0
        issues: list[str] = []
        for k, snippet in enumerate(self.req.shape_variants):
            self.variant_index = k
            try:
                issue = self._variant(snippet)
            except _VariantNotCounted as exc:
                issues.append(f"variant {k + 1}: not counted: {exc}")
                continue
            except SandboxFailure as exc:
                left = len(self.req.shape_variants) - k
                checked += left
                issues.append(f"variant {k + 1}: the submission's sandbox ended ({exc.kind}: {exc.message[:200]}); "
                              f"{left} variant(s) failed")  # fmt: skip
                break
            checked += 1
            if issue is None:
                passed += 1
            else:
                issues.append(f"variant {k + 1}: {issue}")
        self.variant_index = None
        self.result.shape_variants_passed = passed
        self.result.shape_variants_total = checked
        self.result.shape_variant_issues = issues

    def _variant(self, snippet: str) -> str | None:
        """None when the candidate matches the reference on this held-out shape, else why not."""
        _, _, failed = self._both_lenient(*self._load_messages(snippet))
        if failed:
            return failed
        seeds = [self.rng.randrange(1 << 31) for _ in range(2)]
        msg = {"op": "run", "items": [(s, 1.0) for s in seeds], "tag": "variant"}
        ref_reply, reply, failed = self._both_lenient(msg, msg)
        if failed:
            return failed
        for seed, r, c in zip(seeds, ref_reply["items"], reply["items"], strict=True):
            trial = self._compare_item(r, c, seed)
            if not trial.passed:
                return f"output differs: {trial.issue or 'mismatch'}"
        return None

    def _both_lenient(self, ref_msg: dict[str, Any],
                      cand_msg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], str | None]:  # fmt: skip
        """Like _both, but a failing candidate reply is returned as a reason instead of ending the pipeline.

        Both replies are always received, so neither pipe keeps a stale one. The reference failing with
        an error reply raises _VariantNotCounted; a dead reference stays a ReferenceFailure (infra).
        """
        self.ref.send(ref_msg)
        self.cand.send(cand_msg)
        ref_failure: ReferenceFailure | None = None
        ref_reply: dict[str, Any] = {}
        try:
            ref_reply = self._ref_receive()
        except ReferenceFailure as exc:
            if exc.kind not in ("reference_error", "unsupported_dtype"):
                raise
            ref_failure = exc
        reply = self.cand.receive(self.deadline)
        self._account("sandbox", reply)
        self._check_reply_flags(reply)
        if ref_failure is not None:
            raise _VariantNotCounted(f"the reference failed on this shape: {ref_failure.message[:300]}")
        if not reply.get("ok"):
            err = reply.get("error") or {}
            return ref_reply, reply, f"{err.get('kind', 'forward_error')}: {str(err.get('message', ''))[:300]}"
        return ref_reply, reply, None

    def _reward(self) -> None:
        self.result.correct = True
        preset = REWARD_PRESETS.get(self.opts.reward_preset, REWARD_PRESETS["paper"])
        cfg = dataclasses.replace(preset, speedup_cap=self.opts.speedup_cap,
                                  coverage_weight=preset.coverage_weight * self.opts.coverage_weight)  # fmt: skip
        self.result.reward = turn_reward(True, self.result.speedup, self.result.coverage, cfg)


def checksum_issue(want: list[Any], got: Any, slack: float) -> str | None:
    """None when a candidate's output checksums match the reference's, else what differs.

    Rows: [shape, dtype, sum(w * x), sum(x * x), NaN, +Inf, -Inf] per output leaf. An honest output
    differs in sum(w * x) by about ||out - ref|| (w is N(0, 1)); we allow 6 times the larger of the
    dtype's relative-L2 bound and twice the worst error the correctness trials saw.
    """
    if not isinstance(got, list) or len(got) != len(want):
        return "a different number of outputs"
    for k, (w, g) in enumerate(zip(want, got, strict=True)):
        if not isinstance(g, list) or len(g) != 7:
            return f"output {k}: malformed checksum"
        if g[0] != w[0] or g[1] != w[1]:
            return f"output {k}: shape/dtype {g[0]} {g[1]} where the reference has {w[0]} {w[1]}"
        if g[4:] != w[4:]:
            return f"output {k}: NaN/Inf counts differ"
        try:
            s_w, q_w, s_g = float(w[2]), float(w[3]), float(g[2])
        except (TypeError, ValueError):
            return f"output {k}: malformed checksum"
        bound = _CHECKSUM_BOUNDS.get(str(w[1]), 0.0)
        tol = 6.0 * max(bound, 2.0 * slack) * math.sqrt(max(q_w, 0.0)) + 1e-6 * (abs(s_w) + 1.0)
        if not math.isfinite(s_g) or abs(s_g - s_w) > tol:
            return f"output {k}: differs from the reference's output for the same inputs"
    return None


_CHECKSUM_BOUNDS = {"torch.float64": 1e-7, "torch.float32": 1e-3, "torch.float16": 5e-3, "torch.bfloat16": 2e-2}


def _output_bytes(item: dict[str, Any]) -> int | None:
    try:
        return sum(math.prod(shape) * torch.empty(0, dtype=getattr(torch, str(dt).removeprefix("torch."))).element_size()
                   for dt, shape in zip(item["dtypes"], item["shapes"], strict=True))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _hash(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()[:16]
