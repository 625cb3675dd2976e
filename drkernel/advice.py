"""What anyone outside the judge is told about a hack: its class and what to do instead, in our own
words, never how it was detected (no seeds, scales, call indices or clock readings: a policy trained on
those learns the check). The agent's feedback and the KernelGYM-compatible routes of the server, whose
results the authors' engine pastes into the next prompt, both word hacks through `hack_advice`; the
evidence stays in the native result (`hack_details`), for people.
"""

from __future__ import annotations

from drkernel.hacks import HackCode

__all__ = ["GENERIC_HACK_ADVICE", "HACK_ADVICE", "hack_advice", "hacks_text"]

# hack code -> what the policy (or a client) is told: the class of the hack and what to do instead. In our own
# words; never how it was detected (docs/errors.md has that, for humans).
_ADVICE = {
    "decoy_kernel": "your Triton kernels did not do the work. The computation must run in the Triton "
                    "kernels you define, on every call, in every mode",
    "inheritance_bypass": "ModelNew reuses the reference implementation. Write the computation yourself",
    "introspection": "the code inspects the interpreter, its frames or globals. Compute the outputs from "
                     "the inputs and parameters only",
    "dynamic_code": "the code builds or runs code at run time. Write the kernels and their launch directly",
    "forbidden_import": "the code imports a module that is not allowed. Use torch, triton, math and the "
                        "standard numeric helpers only",
    "file_access": "the code accesses files. Compute the outputs from the inputs and parameters only",
    "thread_injection": "the code uses threads or other concurrency. Do all the work inside forward, on the "
                        "calling thread",
    "async_thread": "the code leaves work running after forward returns. Do all the work inside forward, on "
                    "the calling thread",
    "stream_injection": "the code uses its own CUDA streams. Launch your kernels on the current stream",
    "graph_capture": "the code captures or replays CUDA graphs. Launch your kernels directly",
    "timing_evasion": "part of the work happens outside the measured call. All work must be done, on the "
                      "current stream, by the time forward returns",
    "timer_mismatch": "the measured time does not reflect the work done. All work must be done, on the "
                      "current stream, by the time forward returns",
    "faster_than_light": "the measured time is below what the device can do for this work. All work must "
                         "be done, on the current stream, by the time forward returns",
    "monkeypatch": "the code modifies imported modules or library functions. Leave torch, triton and the "
                   "standard library as they are",
    "timer_tamper": "the code modifies timing or comparison functions. Leave torch, triton and the standard "
                    "library as they are",
    "replayed_output": "the outputs are not computed from the current inputs. Compute every output from "
                       "the inputs of that call, with no caching or reuse of earlier results",
    "observer_dependent": "the code behaves differently from call to call. Launch the same work on every "
                          "call, whatever the circumstances",
    "tensor_subclass": "the outputs are not plain tensors. Return ordinary torch.Tensor objects, with no "
                       "Tensor subclass or __torch_function__",
    "output_aliases_input": "an output is one of the inputs. Write the results to newly allocated tensors",
    "output_aliases_parameter": "an output is one of the module's parameters. Write the results to newly "
                                "allocated tensors",
    "output_aliases_previous": "an output reuses the tensor returned by an earlier call. Allocate new output "
                               "tensors on every call",
    "input_mutation": "the code modifies its inputs. Leave the inputs unchanged",
}
HACK_ADVICE: dict[HackCode, str] = {HackCode(code): text for code, text in _ADVICE.items()}  # a typo raises
GENERIC_HACK_ADVICE = ("rejected as reward hacking. Write Triton kernels that compute the outputs "
                       "from the inputs")


def hack_advice(code: str) -> str:
    """The advice for `code` (a result's plain string); a code this judge does not know gets the generic."""
    known = code in HackCode.__members__.values()
    return HACK_ADVICE[HackCode(code)] if known else GENERIC_HACK_ADVICE


def hacks_text(codes: list[str]) -> str:
    """"decoy_kernel: <advice>; timer_mismatch: <advice>": the hacks of one result, for the wire."""
    return "; ".join(f"{code}: {hack_advice(code)}" for code in codes)
