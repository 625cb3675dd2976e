"""An RL rollout ends an episode at an over-long prompt, as the authors' engine does (docs/paper_spec.md
§2.7): the empty turn is recorded (reward 0, no tokens) and nothing more is generated or judged for it."""

from drkernel.agent.env import EnvConfig
from drkernel.agent.policy import Completion, SamplingParams
from drkernel.executors.fake import FakeExecutor
from drkernel.rl.rollout import collect_rollouts
from drkernel.types import Problem

REF = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n"
ANSWER = "```python\nclass ModelNew: pass  # fake: speedup=1.2\n```"


class OverlongAtTurn:
    """The problem marked "#overlong" gets an over-long prompt at turn `at`; all else is answered."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.asked: list[int] = []  # the turn of each conversation it was given

    def count_tokens(self, text: str) -> int:
        return len(text) // 4

    def sample(self, conversations, sampling):
        out = []
        for conv in conversations:
            turn = sum(m["role"] == "assistant" for m in conv)
            self.asked.append(turn)
            if turn == self.at and "#overlong" in conv[0]["content"]:
                out.append(Completion(text="", finish_reason="prompt_overlong", token_ids=[], logprobs=[],
                                      extra={"prompt_ids": [1, 2, 3]}))
            else:
                out.append(Completion(text=ANSWER, finish_reason="stop", token_ids=[7, 8],
                                      logprobs=[-0.1, -0.1], extra={"prompt_ids": [1, 2, 3]}))
        return out


def test_an_overlong_prompt_ends_the_rollout_episode():
    problems = [Problem(name="long", reference_code=REF + "#overlong\n"),
                Problem(name="short", reference_code=REF)]
    sampler = OverlongAtTurn(at=1)
    batch = collect_rollouts(problems, sampler, FakeExecutor(), n=1, env_config=EnvConfig(max_turns=3),
                             sampling=SamplingParams())
    long, short = batch.trajectories
    assert [t.finish_reason for t in long.turns] == ["stop", "prompt_overlong"]  # no turn 3
    assert long.turns[1].reward == 0.0 and long.truncated and long.metadata["stopped"] == "prompt_overlong"
    assert len(short.turns) == 3 and long.error is None
    # turn 3 was asked of the short episode only; the empty turn is a sample without response tokens
    assert sampler.asked == [0, 0, 1, 1, 2]
    empty = [s for s in batch.samples if s.traj == 0 and s.turn == 1]
    assert len(empty) == 1 and empty[0].response_ids == []


def test_each_rollout_round_gets_task_ids_of_its_own():
    """A judge server refuses a task id it already holds with another body (409): the trainer gives
    every round of every step its own episode tag, and the ids carry it."""
    from drkernel.executors.fake import FakeExecutor as Fake

    class Recording(Fake):
        def __init__(self) -> None:
            super().__init__()
            self.ids: list[str] = []

        def evaluate(self, requests):  # noqa: ANN001, ANN201
            self.ids += [r.task_id for r in requests]
            return super().evaluate(requests)

    problems = [Problem(name="p", reference_code=REF)]
    ex = Recording()
    for tag in ("ab12cd.s1r0", "ab12cd.s2r0"):
        collect_rollouts(problems, OverlongAtTurn(at=99), ex, n=2, env_config=EnvConfig(max_turns=2),
                         sampling=SamplingParams(), episode=tag)
    assert len(ex.ids) == 8 and len(set(ex.ids)) == 8, ex.ids
    assert "p#ab12cd.s1r0.0/t0" in ex.ids and "p#ab12cd.s2r0.1/t1" in ex.ids

