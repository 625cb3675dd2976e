"""Recipes are code: importable two ways, carrying the paper's values, overridable with type checks."""

import dataclasses
import json

import pytest

import recipes
from drkernel import recipes as shipped
from drkernel.cli import main
from drkernel.errors import ConfigError
from drkernel.rl.config import (
    RunConfig,
    apply_overrides,
    config_keys,
    from_dict,
    to_dict,
)


def test_top_level_package_is_the_shipped_module():
    assert recipes.dr_kernel_8b is shipped.dr_kernel_8b
    assert set(recipes.__all__) == {"RECIPES", "debug_cpu", "dr_kernel_14b", "dr_kernel_8b", "get_recipe"}
    assert set(shipped.RECIPES) == {"debug_cpu", "dr_kernel_8b", "dr_kernel_14b"}


@pytest.mark.parametrize("name", ["dr_kernel_8b", "dr_kernel_14b"])
def test_paper_recipes_carry_the_paper_values(name):
    cfg = shipped.get_recipe(name)
    assert (cfg.rollout.n, cfg.rollout.max_turns, cfg.trainer.prompts_per_step) == (16, 3, 16)  # §9.3
    assert (cfg.rollout.max_prompt_tokens, cfg.rollout.max_new_tokens) == (10240, 8192)
    assert cfg.rollout.temperature == 1.0 and cfg.rollout.top_p == 1.0
    assert cfg.rl.advantage.estimator == "trloo" and cfg.rl.advantage.gamma == 1.0
    assert cfg.rl.mrs.bounds == (0.999, 1.001) and cfg.rl.mrs.veto == 1e-4  # §6
    assert (cfg.rl.prs.tau, cfg.rl.prs.slope) == (0.3, 0.1)  # §7
    assert cfg.rl.dynamic_sampling.min_group_size == 9 and cfg.rl.dynamic_sampling.std_threshold == 1e-3  # §8
    loss = cfg.rl.loss
    assert (loss.clip_low, loss.clip_high, loss.dual_clip, loss.agg, loss.scale) == (
        0.2, 0.28, 3.0, "seq-mean-token-sum", 1000.0)
    assert (cfg.optim.lr, cfg.optim.weight_decay, cfg.optim.grad_clip) == (1e-6, 0.01, 1.0)  # §5.5
    assert (cfg.trainer.steps, cfg.trainer.validate_every, cfg.trainer.validation_samples) == (300, 10, 8)
    assert cfg.data.validation_levels == (2,)
    assert (cfg.sft.lr, cfg.sft.batch_size, cfg.sft.epochs, cfg.sft.max_length) == (
        2e-5, 64, 4, 18432)  # §9.2
    assert cfg.eval.num_perf_trials == 100 and cfg.eval.atol == 1e-2  # §11


def test_variants_derive_with_dataclasses_replace():
    cfg = shipped.dr_kernel_8b()
    short = dataclasses.replace(cfg, rollout=dataclasses.replace(cfg.rollout, max_turns=5))
    assert short.rollout.max_turns == 5 and cfg.rollout.max_turns == 3


def test_overrides_are_type_checked_and_nested():
    cfg = apply_overrides(
        shipped.debug_cpu(),
        ["rl.advantage=grpo", "rl.mrs.bounds=0.99,1.01", "optim.lr=3e-4", "rl.mrs.veto=none",
         "data.problems=101_ReLU", "eval.num_perf_trials=5", "log.tensorboard=false"],
    )
    assert cfg.rl.advantage.estimator == "grpo" and cfg.rl.mrs.bounds == (0.99, 1.01)
    assert cfg.rl.mrs.veto is None
    assert cfg.optim.lr == 3e-4 and cfg.data.problems == ("101_ReLU",)
    assert cfg.eval.num_perf_trials == 5 and cfg.log.tensorboard is False
    for bad, words in [
        ("rl.advantage=ppo", "not one of"),
        ("trainer.steps=1.5", "integer"),
        ("rl.mrs.bounds=1", "2 values"),
        ("rl.nothing=1", "unknown key"),
        ("rl.mrs.bounds=1.1,0.9", "lower"),  # the component's own __post_init__ check
        ("novalue", "key=value"),
    ]:
        with pytest.raises(ConfigError, match=words):
            apply_overrides(RunConfig(), [bad])


def test_a_text_setting_is_the_text_as_given():
    # a comma split it into a list, which became its JSON or repr: model.path=/models/a,b was
    # "['/models/a', 'b']" and name=sweep,lr was '["sweep", "lr"]'
    cfg = apply_overrides(shipped.debug_cpu(), [
        "model.path=/models/a,b", "name=sweep,lr", "rollout.served_model=org/m,v2", "data.suite=a,b.jsonl",
        "log.wandb_project=[x]", "data.validation_suite=none",
    ])
    assert cfg.model.path == "/models/a,b" and cfg.name == "sweep,lr"
    assert cfg.rollout.served_model == "org/m,v2" and cfg.data.suite == "a,b.jsonl"
    assert cfg.log.wandb_project == "[x]" and cfg.data.validation_suite is None
    assert apply_overrides(shipped.debug_cpu(), ["name=42"]).name == "42"


def test_the_advantage_section_is_its_owners_config_and_old_keys_still_work(tmp_path):
    """`rl.advantage` is an AdvantageConfig (it copied its fields one by one before): the shorthand
    `rl.advantage=grpo` and the keys of before (`rl.gamma`, `rl.baseline_members`, ...) still set it,
    on the command line and in a config.json written before the change."""
    from drkernel.rl.advantages import AdvantageConfig
    from drkernel.rl.config import load_config

    cfg = apply_overrides(RunConfig(), ["rl.advantage=rloo", "rl.gamma=0.5", "rl.baseline_members=valid",
                                        "rl.advantage.singleton=zero", "rl.grpo_scale_by_std=true"])
    assert cfg.rl.advantage == AdvantageConfig(estimator="rloo", gamma=0.5, baseline_members="valid",
                                               singleton="zero", grpo_scale_by_std=True)
    with pytest.raises(ConfigError, match="rl.advantage.gamma"):
        apply_overrides(RunConfig(), ["rl.gamma=2"])
    with pytest.raises(ConfigError, match="rl.advantage.estimator: 'ppo' is not one of"):
        apply_overrides(RunConfig(), ["rl.advantage=ppo"])

    old = to_dict(shipped.dr_kernel_8b())
    old["rl"].pop("advantage")
    old["rl"].update(advantage="grpo", gamma=0.0, singleton="zero", baseline_members="valid",
                     grpo_scale_by_std=False)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(old))
    loaded = load_config(path)
    assert loaded.rl.advantage == AdvantageConfig(estimator="grpo", gamma=0.0, singleton="zero",
                                                  baseline_members="valid")
    assert loaded.rl.mrs == shipped.dr_kernel_8b().rl.mrs
    assert "rl.advantage.estimator" in config_keys() and "rl.gamma" not in config_keys()


def test_config_round_trips_through_json():
    for fn in shipped.RECIPES.values():
        cfg = fn()
        again = from_dict(RunConfig, json.loads(json.dumps(to_dict(cfg))))
        assert again == cfg
    assert "rl.mrs.bounds" in config_keys() and "model.tiny.hidden_size" in config_keys()


def test_cli_lists_and_prints_recipes(capsys):
    assert main(["train", "recipes"]) == 0
    assert "dr_kernel_14b" in capsys.readouterr().out
    assert main(["train", "recipes", "dr_kernel_8b", "--set", "rl.advantage=grpo"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["rl"]["advantage"]["estimator"] == "grpo" and printed["rollout"]["n"] == 16
    assert main(["train", "rl", "--recipe", "nope", "--run-dir", "unused"]) == 2
    assert "unknown recipe" in capsys.readouterr().err


def test_print_config_needs_no_run_dir_and_training_does(capsys):
    assert main(["train", "rl", "--recipe", "dr_kernel_8b", "--print-config"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "dr_kernel_8b"
    assert main(["train", "rl", "--recipe", "debug_cpu"]) == 2
    assert "--run-dir is required" in capsys.readouterr().err


def test_the_8b_recipe_names_its_missing_data_file(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["train", "rl", "--recipe", "dr_kernel_8b", "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "cuda_llm_rl_thinking_1025.parquet" in err and "hkust-nlp/drkernel-rl-data" in err
    assert "--set data.suite=" in err


def test_recipe_keys_into_a_closed_pipe_is_quiet():
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from drkernel.cli import main; sys.exit(main())", "train",
         "recipes", "--keys"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120,
        preexec_fn=None,
    )
    assert proc.returncode == 0 and "rl.advantage" in proc.stdout
    head = subprocess.run(
        f"{sys.executable} -c 'import sys; from drkernel.cli import main; sys.exit(main())' train recipes"
        " --keys | head -n 1", shell=True, capture_output=True, text=True, timeout=120,
    )
    assert head.stdout.count("\n") == 1
    assert "Traceback" not in head.stderr and "BrokenPipe" not in head.stderr, head.stderr


def test_sft_help_shows_defaults(capsys):
    import pytest

    with pytest.raises(SystemExit):
        main(["train", "sft", "--help"])
    out = capsys.readouterr().out
    assert "(required: SFT has no toy default)" in out and "--overwrite" in out


@pytest.mark.parametrize("content, words", [
    (None, "no such file"),
    ("", "not JSON"),
    (b"\xff\xfe{}", "not JSON"),
    ("trainer: {steps: 2}\n", "not JSON"),
    ("[]", "expected a JSON object"),
])
def test_a_config_file_that_is_no_config_is_one_line(tmp_path, capsys, content, words):
    path = tmp_path / "config.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    assert main(["train", "rl", "--config", str(path), "--print-config"]) == 2
    err = capsys.readouterr().err
    assert words in err and str(path) in err and "Traceback" not in err
    assert main(["train", "rl", "--config", str(tmp_path), "--print-config"]) == 2
    assert "cannot read" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_numbers_must_be_finite_on_the_command_line_and_in_a_config_file(tmp_path, value):
    with pytest.raises(ConfigError, match="optim.lr: expected a finite number"):
        apply_overrides(RunConfig(), [f"optim.lr={value}"])
    data = to_dict(shipped.debug_cpu())
    data["optim"]["lr"] = float(value.lower().replace("infinity", "inf"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    from drkernel.rl.config import load_config

    with pytest.raises(ConfigError, match="optim.lr: expected a finite number"):
        load_config(path)


@pytest.mark.parametrize("override, key", [
    ("model.tiny.heads=0", "model.tiny.heads"),  # was a ZeroDivisionError traceback
    ("optim.betas=2,3", "optim.betas"),  # was torch's ValueError traceback once the model had loaded
    ("optim.betas=0.9,-0.1", "optim.betas"),
    ("optim.weight_decay=-1", "optim.weight_decay"),
    ("trainer.validation_samples=0", "trainer.validation_samples"),  # validation ran nothing, silently
    ("trainer.validation_top_p=5", "trainer.validation_top_p"),  # refused only at the first validation
    ("trainer.validation_top_p=0", "trainer.validation_top_p"),
    ("data.limit=0", "data.limit"),  # meant no limit
    ("data.limit=-1", "data.limit"),  # dropped the last problem
    ("data.validation_limit=0", "data.validation_limit"),
    ("data.problems=101_ReLU,101_ReLU", "data.problems"),  # trained on twice an epoch
    ("data.problems=", "data.problems"),  # [''], refused only at load time
    ("data.validation_problems=a,,b", "data.validation_problems"),
    ("data.levels=7", "data.levels"),  # refused only once the model had loaded
    ("data.validation_levels=0", "data.validation_levels"),
    ("model.device=", "model.device"),  # these two were refused only once the run had started
    ("rollout.feedback_chars=0", "rollout.feedback_chars"),
])
def test_settings_out_of_range_are_refused_with_their_key(capsys, override, key):
    with pytest.raises(ConfigError, match=rf"^{key}: "):
        apply_overrides(shipped.debug_cpu(), [override])
    assert main(["train", "rl", "--recipe", "debug_cpu", "--set", override, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err


def test_data_levels_take_the_levels_every_levels_flag_takes() -> None:
    """data.levels repeated the bound of problems.parse_levels (the --levels of bench, audit, suite and
    train prepare): both read problems.loaders.KERNELBENCH_LEVELS now."""
    import argparse

    from drkernel.problems.loaders import parse_levels
    from drkernel.rl.config import DataConfig

    for level in range(-1, 8):
        try:
            flag_ok = parse_levels(str(level)) == (level,)
        except argparse.ArgumentTypeError:
            flag_ok = False
        try:
            DataConfig(levels=(level,), validation_levels=(level,))
            config_ok = True
        except ConfigError:
            config_ok = False
        assert flag_ok == config_ok, level


@pytest.mark.parametrize("override, key", [
    ("eval.num_correct_trials=0", "eval.num_correct_trials"),
    ("eval.timeout_s=-1", "eval.timeout_s"),
    ("eval.num_perf_trials=0", "eval.num_perf_trials"),
    ("eval.reference_backend=inductor", "eval.reference_backend"),
    ("eval.entry_point=my model", "eval.entry_point"),
])
def test_options_every_judge_refuses_are_refused_with_the_config(tmp_path, capsys, override, key):
    # they were accepted: the judge refused every evaluation as an infra error, each step trained on
    # nothing (reward 0, groups 0/2) and the run ended with exit code 0
    with pytest.raises(ConfigError, match=rf"^{key}: "):
        apply_overrides(shipped.debug_cpu(), [override])
    assert main(["train", "rl", "--recipe", "debug_cpu", "--set", override, "--run-dir",
                 str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert key in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()
    data = to_dict(shipped.debug_cpu())
    data["eval"]["num_correct_trials"] = 0  # a config.json edited by hand
    (tmp_path / "config.json").write_text(json.dumps(data))
    from drkernel.rl.config import load_config

    with pytest.raises(ConfigError, match=r"config.json: eval.num_correct_trials: "):
        load_config(tmp_path / "config.json")


def test_eval_entry_point_is_each_problems_own(tmp_path):
    # it was accepted and silently replaced by each problem's entry point in every request
    with pytest.raises(ConfigError, match=r"^eval.entry_point: each problem names its own"):
        apply_overrides(shipped.debug_cpu(), ["eval.entry_point=Net"])
    with pytest.raises(ConfigError, match=r"^eval.entry_point: each problem names its own"):
        RunConfig(eval=dataclasses.replace(RunConfig().eval, entry_point="Net"))
    assert "eval.entry_point" not in config_keys()
    assert "entry_point" not in to_dict(shipped.debug_cpu())["eval"]
    from drkernel.rl.config import load_config

    data = to_dict(shipped.debug_cpu())
    data["eval"]["entry_point"] = "Model"  # a config.json written before: loads
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert load_config(tmp_path / "config.json") == shipped.debug_cpu()
    data["eval"]["entry_point"] = "Net"
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"config.json: eval.entry_point: each problem names its own"):
        load_config(tmp_path / "config.json")
