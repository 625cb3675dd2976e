"""`drkernel train rl` in-process on the fake judge: what a rerun of a run folder says."""

from drkernel.cli import main

FAST = ["--recipe", "debug_cpu", "--set", "judge.executor=fake", "--set", "trainer.validate_every=0",
        "--set", "log.tensorboard=false"]


def test_a_rerun_with_fewer_steps_than_done_says_where_the_run_stands(tmp_path, capsys):
    run = str(tmp_path / "run")
    assert main(["train", "rl", *FAST, "--run-dir", run, "--set", "trainer.steps=2"]) == 0
    assert "run finished at step 2" in capsys.readouterr().out
    assert main(["train", "rl", *FAST, "--run-dir", run, "--set", "trainer.steps=1"]) == 0
    out = capsys.readouterr().out
    assert "finished at step 1" not in out  # the run is at step 2: it said step 1 before
    assert f"{run} is already at step 2, past trainer.steps=1: nothing to train" in out
