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
