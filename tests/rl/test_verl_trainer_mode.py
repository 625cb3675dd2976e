"""trainer.v1.trainer_mode=drkernel runs verl's sync paths (issue 34, blocker 5).

verl's main_ppo picks the trainer class by trainer_mode, and its base trainer reads the same key for its
sync/async choices (`!= "sync"` is async: the async replay buffer, gen_batch_size 1, TransferQueue
checkpoints, re-issuing in-flight prompts, prompt data kept in TransferQueue). The drkernel trainer is
built here on the CPU from the recipe's composed config, as main_ppo's TaskRunner builds it.
"""

from __future__ import annotations

import warnings

import pytest

pytest.importorskip("verl")
pytest.importorskip("transfer_queue")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import transfer_queue as tq
    from tensordict import TensorDict
    from verl.trainer.ppo.v1 import get_trainer_cls
    from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer, ReplayBufferAsync

    import drkernel.rl.verl  # noqa: F401  (registers the trainer, as verl's plugin entry point does)
    from drkernel.rl.verl.trainer import DrKernelTrainer

from tests.rl.test_verl_recipe import _compose, recipe_overrides


@pytest.fixture(scope="module")
def trainer():
    cfg = _compose(recipe_overrides("run_8b.sh"))
    assert cfg.trainer.v1.trainer_mode == "drkernel"
    cls = get_trainer_cls(cfg.trainer.v1.trainer_mode)  # what main_ppo's TaskRunner does
    assert cls is DrKernelTrainer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(config=cfg)


def test_the_drkernel_trainer_runs_in_sync_mode(trainer):
    assert trainer.trainer_mode == "sync" and trainer.config.trainer.v1.trainer_mode == "sync"
    buffer = trainer.replay_buffer
    assert type(buffer) is ReplayBuffer and not isinstance(buffer, ReplayBufferAsync)
    assert trainer.parameter_sync_step == 1
    assert trainer.drkernel_config.name == "dr_kernel_8b"


def test_no_inflight_prompts_are_reissued(trainer, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("the sync trainer does not list TransferQueue's in-flight prompts")

    monkeypatch.setattr(tq, "kv_list", fail)
    assert trainer._reissue_inflight_prompts() == 0


def test_prompts_go_to_the_rollout_without_their_data(trainer, monkeypatch):
    puts = []
    monkeypatch.setattr(tq, "kv_batch_put", lambda **kw: puts.append(kw))

    class Manager:
        def __init__(self):
            self.batches = []

        def generate_sequences(self, batch):
            self.batches.append(batch)

    monkeypatch.setattr(trainer, "agent_loop_manager", Manager(), raising=False)
    monkeypatch.setattr(trainer, "global_steps", 1, raising=False)  # set by fit() / checkpoint loading
    batch = TensorDict({"uid": ["u0", "u1"]}, batch_size=2)
    assert trainer._submit_batch_to_rollout(batch) == 2
    assert len(puts) == 1 and puts[0]["keys"] == ["u0", "u1"]
    assert "fields" not in puts[0]  # the async modes persist the prompt data for their checkpoints
    assert trainer.agent_loop_manager.batches == [batch]


def test_the_dataloader_fetches_whole_batches(tmp_path):
    """The async modes force data.gen_batch_size=1 (one prompt per fetch); sync fetches train_batch_size."""
    from drkernel.problems import load_suite
    from drkernel.rl.verl_data import write_parquet
    from tests.rl.test_verl_golden import _tiny

    data = write_parquet(load_suite("builtin"), tmp_path / "train.parquet")
    cfg = _compose([*recipe_overrides("run_8b.sh"), f"data.train_files={data}", f"data.val_files={data}",
                    "data.dataloader_num_workers=0"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = DrKernelTrainer(config=cfg)
        trainer.tokenizer, trainer.processor = _tiny()[1], None  # init() loads the model's tokenizer
        trainer._init_dataloader()
    assert cfg.data.get("gen_batch_size") is None
    assert trainer.train_dataloader.batch_size == cfg.data.train_batch_size == 16
    assert trainer.steps_per_epoch == 25 // 16
