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


def test_a_run_dir_that_is_a_file_or_cannot_be_made_is_one_line(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("")
    assert main(["train", "rl", *FAST, "--run-dir", str(afile)]) == 2
    assert f"--run-dir {afile}: is a file, not a folder" in capsys.readouterr().err
    assert main(["train", "rl", *FAST, "--run-dir", str(afile / "run")]) == 2
    err = capsys.readouterr().err
    assert f"--run-dir {afile / 'run'}: cannot make the folder" in err and "Traceback" not in err


def test_recipe_and_config_together_are_refused(tmp_path, capsys):
    config = tmp_path / "config.json"
    assert main(["train", "recipes", "debug_cpu"]) == 0
    config.write_text(capsys.readouterr().out)
    for command in (["rl"], ["sft", "--data", "d.jsonl", "--out", str(tmp_path / "o")]):
        assert main(["train", *command, "--recipe", "dr_kernel_8b", "--config", str(config),
                     "--print-config"]) == 2
        assert "--recipe and --config: give one" in capsys.readouterr().err  # the recipe was ignored
    assert main(["train", "rl", "--config", str(config), "--print-config"]) == 0
    assert '"name": "debug_cpu"' in capsys.readouterr().out
    assert main(["train", "rl", "--print-config"]) == 0  # no --recipe: debug_cpu, as --help says
    assert '"name": "debug_cpu"' in capsys.readouterr().out


def test_a_run_folders_config_json_that_no_longer_loads_is_named(tmp_path, capsys):
    # the rerun said "trainer.steps: expected an integer, got 'x'" beside a --set trainer.steps=3 that
    # is an integer: the value came from RUN_DIR/config.json, which the line did not name
    import json

    run = tmp_path / "run"
    assert main(["train", "rl", *FAST, "--run-dir", str(run), "--set", "trainer.steps=1"]) == 0
    saved = run / "config.json"
    data = json.loads(saved.read_text())
    data["trainer"]["steps"] = "x"
    saved.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["train", "rl", *FAST, "--run-dir", str(run), "--set", "trainer.steps=3"]) == 2
    assert f"drkernel train: {saved}: trainer.steps: expected an integer, got 'x'" in capsys.readouterr().err
    data["trainer"]["steps"], data["rl"]["new_setting"] = 1, True  # written by another version
    saved.write_text(json.dumps(data))
    assert main(["train", "rl", "--config", str(saved), "--print-config"]) == 2
    assert f"{saved}: rl: unknown key(s) new_setting" in capsys.readouterr().err


def test_a_resume_may_move_the_judge_or_cut_the_batch_otherwise_but_not_change_what_is_learned(tmp_path):
    """A judge service at a new address, or another micro-batch split of the same batch, was refused as
    "another config"; the settings that change what a step learns still are."""
    import pytest

    from drkernel.errors import ConfigError
    from drkernel.recipes import debug_cpu
    from drkernel.rl.cli import _check_resume
    from drkernel.rl.config import apply_overrides, save_config

    (tmp_path / "checkpoints").mkdir()
    base = apply_overrides(debug_cpu(), ["judge.executor=http", "judge.base_url=http://old:1"])
    save_config(base, tmp_path / "config.json")
    moved = apply_overrides(base, ["judge.base_url=http://new:2", "trainer.micro_batch_tokens=4096"])
    assert _check_resume(moved, tmp_path, force=False) == [
        "judge.base_url: http://old:1 -> http://new:2", "trainer.micro_batch_tokens: 8192 -> 4096"]
    assert _check_resume(base, tmp_path, force=False) == []
    for learned in ("optim.lr=0.01", "trainer.prompts_per_step=3", "rl.advantage=grpo",
                    "reward.speedup_cap=2", "rollout.n=2", "eval.timeout_s=5", "judge.deadline_factor=0.5"):
        with pytest.raises(ConfigError, match="another config") as err:
            _check_resume(apply_overrides(moved, [learned]), tmp_path, force=False)
        assert learned.split("=")[0] in str(err.value) and "judge.base_url" not in str(err.value)


def test_a_resume_may_generate_in_other_batches(tmp_path):
    """rollout.generation_batch (how many sequences the model backend generates together) was refused as
    "another config": a run that ran out of memory generating could not go on with smaller batches."""
    from drkernel.recipes import debug_cpu
    from drkernel.rl.cli import _check_resume
    from drkernel.rl.config import apply_overrides, save_config

    (tmp_path / "checkpoints").mkdir()
    save_config(debug_cpu(), tmp_path / "config.json")
    smaller = apply_overrides(debug_cpu(), ["rollout.generation_batch=4"])
    assert _check_resume(smaller, tmp_path, force=False) == ["rollout.generation_batch: 16 -> 4"]


def test_a_resume_says_in_one_line_what_changed(tmp_path, capsys):
    run = str(tmp_path / "run")
    assert main(["train", "rl", *FAST, "--run-dir", run, "--set", "trainer.steps=1"]) == 0
    capsys.readouterr()
    assert main(["train", "rl", *FAST, "--run-dir", run, "--set", "trainer.steps=2",
                 "--set", "trainer.micro_batch_tokens=4096"]) == 0
    err = capsys.readouterr().err
    assert f"{run}: resuming with trainer.micro_batch_tokens: 8192 -> 4096, trainer.steps: 1 -> 2\n" in err


def test_log_wandb_on_without_the_package_is_one_line_before_anything_starts(tmp_path, capsys, monkeypatch):
    """log.wandb=on says "always", yet with no wandb package the run trained without it, a warning among
    the model's loading lines the only sign; now it is one line and exit code 2, before the run folder."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "wandb" else real(name, *a))
    run = tmp_path / "run"
    assert main(["train", "rl", *FAST, "--run-dir", str(run), "--set", "log.wandb=on"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "log.wandb=on: the wandb package is not installed" in err[0], err
    assert not run.exists()
    out = tmp_path / "sft"
    data = tmp_path / "d.jsonl"
    data.write_text("")
    assert main(["train", "sft", "--recipe", "debug_cpu", "--data", str(data), "--out", str(out),
                 "--set", "log.wandb=on"]) == 2
    assert "log.wandb=on: the wandb package is not installed" in capsys.readouterr().err
    assert not out.exists()


def test_a_resume_that_moves_the_learning_rate_schedule_is_refused(tmp_path, capsys):
    """trainer.steps may change on a resume because it changes no step's learning; with a cosine schedule
    or a warm-up, each step's learning rate is drawn over trainer.steps, so a resume with another one
    trained every later step at another rate without a word. It is refused now (--force-config resumes)."""
    run = str(tmp_path / "run")
    cosine = ["--set", "optim.schedule=cosine"]
    assert main(["train", "rl", *FAST, *cosine, "--run-dir", run, "--set", "trainer.steps=1"]) == 0
    capsys.readouterr()
    assert main(["train", "rl", *FAST, *cosine, "--run-dir", run, "--set", "trainer.steps=2"]) == 2
    err = capsys.readouterr().err
    assert "trainer.steps 1 -> 2 moves the learning rate of every step after the resume" in err, err
    assert "--force-config" in err
    assert main(["train", "rl", *FAST, *cosine, "--run-dir", run, "--set", "trainer.steps=2",
                 "--force-config"]) == 0
