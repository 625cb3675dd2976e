"""The hack codes: the one list of what the judge may call a hack, each member with its meaning.

A code is a `str` (a `StrEnum`), so results, JSON and the wire carry it as the plain name
(`"decoy_kernel"`). Where the judge raises one, it names the member; `advice.HACK_ADVICE` and the table
in docs/errors.md are checked against this list (`tests/test_hack_codes.py`).
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["HackCode"]


class HackCode(StrEnum):
    """A class of reward hacking. `doc` says what the code means (docs/errors.md says how it is seen)."""

    doc: str

    def __new__(cls, value: str, doc: str = "") -> HackCode:
        member = str.__new__(cls, value)
        member._value_ = value
        member.doc = doc
        return member

    DECOY_KERNEL = ("decoy_kernel",
                    "the submission's own Triton kernels did not do the work: none launched, in a trial, a "
                    "mode or a timed window")
    INHERITANCE_BYPASS = ("inheritance_bypass", "ModelNew reuses the reference implementation")
    INTROSPECTION = ("introspection",
                     "the code reads the interpreter's state: frames, globals, the garbage collector")
    DYNAMIC_CODE = ("dynamic_code", "the code builds or loads code that is not in its source")
    FORBIDDEN_IMPORT = ("forbidden_import", "an import outside the allowed modules")
    FILE_ACCESS = ("file_access", "the code reads or writes files")
    THREAD_INJECTION = ("thread_injection", "the code imports threads, processes or an event loop")
    ASYNC_THREAD = ("async_thread", "a thread of the submission is still alive after forward returned")
    STREAM_INJECTION = ("stream_injection", "the code uses CUDA streams of its own")
    GRAPH_CAPTURE = ("graph_capture", "the code captures or replays CUDA graphs")
    TIMING_EVASION = ("timing_evasion", "work runs outside the timed stream or after the timed window")
    TIMER_MISMATCH = ("timer_mismatch",
                      "the reported time is below what the judge's own observations bound it to")
    FASTER_THAN_LIGHT = ("faster_than_light",
                         "the timed kernel moved its minimum bytes faster than the device can")
    MONKEYPATCH = ("monkeypatch", "the code replaced attributes of imported modules or library functions")
    TIMER_TAMPER = ("timer_tamper", "the code imports or replaces the clocks and timing functions")
    REPLAYED_OUTPUT = ("replayed_output",
                       "an output was not computed from the inputs of its own call (cached, replayed, "
                       "skipped, missing)")
    OBSERVER_DEPENDENT = ("observer_dependent", "the work differs when the profiler watches")
    TENSOR_SUBCLASS = ("tensor_subclass", "an output is not a plain torch.Tensor")
    OUTPUT_ALIASES_INPUT = ("output_aliases_input", "an output shares storage with an input")
    OUTPUT_ALIASES_PARAMETER = ("output_aliases_parameter", "an output shares storage with a parameter")
    OUTPUT_ALIASES_PREVIOUS = ("output_aliases_previous",
                               "an output shares storage with the previous call's output")
    INPUT_MUTATION = ("input_mutation", "the submission changed its inputs in place")
