from drkernel.agent.extraction import extract_code, preflight_result
from drkernel.types import EvalOutcome

CODE = "import torch\nclass ModelNew(torch.nn.Module):\n    pass\n"


def test_last_fenced_block_wins():
    text = f"first\n```python\nx = 1\n```\nthen\n```python\n{CODE}```\nbye"
    ex = extract_code(text)
    assert ex.method == "last_fence" and ex.code == CODE


def test_answer_block_has_priority_over_later_blocks():
    text = f"```answer\n{CODE}```\nand a test:\n```python\nprint(1)\n```"
    ex = extract_code(text)
    assert ex.method == "answer_block" and ex.code == CODE


def test_marker_block():
    text = f"# Kernel Implementation\n{CODE}# End\nmore prose"
    ex = extract_code(text)
    assert ex.method == "marker" and "class ModelNew" in ex.code


def test_unclosed_final_fence_from_a_truncated_response():
    text = f"Plan.\n```python\nx = 1\n```\nFinal:\n```python\n{CODE}    def forward(self"
    ex = extract_code(text)
    assert ex.method == "unclosed_fence" and ex.code.startswith("import torch")


def test_think_section_is_ignored():
    text = f"<think>```python\nclass ModelNew: draft\n```</think>\n```python\n{CODE}```"
    assert extract_code(text).code == CODE
    assert extract_code("<think>```python\nclass ModelNew: x\n```</think>no code").method == "none"


def test_whole_response_when_it_is_code():
    ex = extract_code(CODE)
    assert ex.method == "whole_response" and ex.code == CODE


def test_no_code_is_a_compile_error_without_the_judge():
    ex = extract_code("Sorry, I can't do that.")
    assert not ex.found and ex.method == "none"
    r = preflight_result(ex)
    assert r is not None and r.outcome is EvalOutcome.COMPILE_ERROR
    assert r.error.kind == "no_code" and r.reward == 0.0


def test_code_without_entry_class_is_rejected_before_judging():
    ex = extract_code("```python\ndef f():\n    return 1\n```")
    r = preflight_result(ex)
    assert r.error.kind == "no_code" and "ModelNew" in r.error.message
    assert preflight_result(extract_code(f"```python\n{CODE}```")) is None


def test_thinking_opened_by_the_chat_template_is_ignored():
    # DeepSeek-R1 and Qwen3 thinking templates open <think> in the prompt: the answer holds only </think>
    draft = "```python\n# Kernel draft\nclass ModelNew: draft\n```"
    assert extract_code(f"Let me try.\n{draft}\n</think>\nFinal:\n```python\n{CODE}```").code == CODE
    assert extract_code(f"Let me try.\n{draft}\n</think>\nI cannot do it.").method == "none"


def test_thinking_cut_by_the_token_limit_is_ignored():
    # an answer that ran out of tokens while thinking submits no draft from its reasoning
    assert extract_code(f"<think>\nLet me try.\n```python\n{CODE}```\nhmm, but").method == "none"
    assert extract_code(f"```python\n{CODE}```\n<think>\nmore ideas").code == CODE


def test_a_fence_indented_in_a_list_gives_code_at_the_margin():
    indented = "".join("   " + line + "\n" for line in CODE.splitlines())
    ex = extract_code(f"1. The kernel:\n   ```python\n{indented}   ```\n2. Done.")
    assert ex.method == "last_fence" and ex.code == CODE
    compile(ex.code, "k.py", "exec")


def test_a_usage_block_or_an_empty_block_after_the_kernel_does_not_hide_it():
    """The last block was taken whatever it held: a usage example after the kernel was submitted (a
    `no ModelNew` compile error), an empty one sent the whole answer, prose and all, to the judge."""
    usage = f"```python\n{CODE}```\nUsage:\n```python\nm = ModelNew()\n```"
    assert extract_code(usage).code == CODE and extract_code(usage).method == "last_fence"
    empty = f"```python\n{CODE}```\nI could add tests:\n```python\n```\n"
    assert extract_code(empty).code == CODE
    # of two blocks that define the class, the last (a revision) wins; without one, the last non-empty
    revised = CODE.replace("pass", "x = 2")
    assert extract_code(f"```python\n{CODE}```\nbetter:\n```python\n{revised}```").code == revised
    assert extract_code("```python\nx = 1\n```\n```python\ny = 2\n```\n```\n```").code == "y = 2\n"
