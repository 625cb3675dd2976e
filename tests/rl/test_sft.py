"""Multi-turn SFT: loss on assistant tokens only, a tiny model learns the answer, LoRA, the CLI."""

import json
import sys

import pytest
import torch

from drkernel.agent.trajectories import Trajectory, Turn, save_trajectories
from drkernel.cli import main
from drkernel.errors import ConfigError
from drkernel.rl.config import SFTConfig, TinyModelConfig
from drkernel.rl.sft import load_conversations, run_sft, tokenize_conversation
from drkernel.rl.tiny import build_tiny, macro_text
from drkernel.types import EvalOutcome, EvalResult

KERNEL = "class ModelNew:\n    pass"


def _tiny():
    return build_tiny(TinyModelConfig(), {"p": {"honest": KERNEL, "other": "class ModelNew:\n    x = 1"}},
                      seed=0)


def _conversation():
    return [
        {"role": "user", "content": "here is my code"},
        {"role": "assistant", "content": "ok" + macro_text(KERNEL)},
        {"role": "user", "content": "fast ok"},
        {"role": "assistant", "content": "kernel" + macro_text(KERNEL)},
    ]


def test_labels_cover_assistant_turns_and_their_end_tokens_only():
    _, tok = _tiny()
    ex = tokenize_conversation(tok, _conversation(), max_length=512)
    labelled = [i for i, lab in zip(ex.input_ids, ex.labels) if lab]
    assert tok.convert_ids_to_tokens(labelled[:1] + labelled[3:4]) == ["ok", "kernel"]
    assert tok.convert_ids_to_tokens([labelled[2], labelled[5]]) == ["<|end|>", "<|end|>"]
    assert len(labelled) == 6  # word, macro, end-of-turn; twice
    unlabelled = tok.convert_ids_to_tokens([i for i, lab in zip(ex.input_ids, ex.labels) if not lab])
    assert "<|assistant|>" in unlabelled and "here" in unlabelled and "fast" in unlabelled
    short = tokenize_conversation(tok, _conversation(), max_length=5)
    assert len(short.input_ids) == 5  # right truncation


def test_sft_teaches_a_tiny_model_the_assistant_answer(tmp_path):
    model, tok = _tiny()
    cfg = SFTConfig(lr=3e-2, batch_size=4, micro_batch_size=2, epochs=15, max_length=256, warmup_ratio=0.0,
                    schedule="constant")
    summary = run_sft(cfg, [_conversation()] * 4, model, tok, tmp_path, tensorboard=False)
    losses = [json.loads(line)["sft/loss"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert summary["steps"] == 15 and losses[-1] < 0.2 * losses[0]
    from drkernel.rl.build import load_pretrained

    loaded, tok2 = load_pretrained(str(tmp_path / "model"), dtype="float32")
    prompt = tok2.apply_chat_template(_conversation()[:1], tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tok2(prompt, add_special_tokens=False)["input_ids"]])
    out = loaded.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=3,
                          do_sample=False, pad_token_id=tok2.pad_token_id)
    assert tok2.convert_ids_to_tokens(out[0, ids.shape[1] :]) == ["ok", macro_text(KERNEL), "<|end|>"]


def test_sft_takes_a_seed_of_any_size(tmp_path):
    # `--set sft.seed=$(date +%s%N)` (or a negative past torch's range) was a ValueError out of torch
    model, tok = _tiny()
    cfg = SFTConfig(batch_size=2, micro_batch_size=2, epochs=1, max_length=128, seed=10**30)
    assert run_sft(cfg, [_conversation()] * 2, model, tok, tmp_path, tensorboard=False)["steps"] == 1


def test_lora_adapters_are_merged_into_the_saved_model(tmp_path):
    pytest.importorskip("peft")
    model, tok = _tiny()
    cfg = SFTConfig(lr=1e-2, batch_size=2, micro_batch_size=1, epochs=1, max_length=128, lora_rank=4)
    run_sft(cfg, [_conversation()] * 2, model, tok, tmp_path, tensorboard=False)
    from safetensors.torch import load_file

    keys = load_file(tmp_path / "model" / "model.safetensors").keys()
    assert keys and not any("lora" in k for k in keys)


def test_lora_without_peft_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)
    model, tok = _tiny()
    with pytest.raises(ConfigError, match="needs peft"):
        run_sft(SFTConfig(lora_rank=4, max_length=128), [_conversation()], model, tok, tmp_path,
                tensorboard=False)


def test_cli_sft_on_agent_trajectories(tmp_path, capsys):
    ok = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.5)
    traj = Trajectory(problem="101_ReLU", sample=0, prompt=[{"role": "user", "content": "optimize here"}])
    for i in range(2):
        traj.turns.append(Turn(index=i, response="kernel ok", code=None, extraction="none", result=ok,
                               reward=2.5, feedback="fast ok"))
    data = tmp_path / "traj.jsonl"
    save_trajectories(data, [traj, traj])
    assert len(load_conversations(data)) == 2
    out = tmp_path / "sft"
    rc = main(["train", "sft", "--recipe", "debug_cpu", "--data", str(data), "--out", str(out),
               "--set", "sft.epochs=1", "--set", "log.tensorboard=false"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["examples"] == 2
    assert (out / "model" / "config.json").is_file() and (out / "config.json").is_file()
    (tmp_path / "empty.jsonl").write_text(json.dumps({"messages": [{"role": "user", "content": "x"}]}) + "\n")
    capsys.readouterr()
    assert main(["train", "sft", "--recipe", "debug_cpu", "--data", str(tmp_path / "empty.jsonl"),
                 "--out", str(tmp_path / "sft2")]) == 2
    assert "no conversation with an assistant message" in capsys.readouterr().err
    assert not (tmp_path / "sft2").exists()  # data that cannot be read left an empty --out behind
    assert main(["train", "sft", "--recipe", "debug_cpu", "--data", str(tmp_path / "missing.jsonl"),
                 "--out", str(tmp_path / "sft3")]) == 2
    assert "no such file" in capsys.readouterr().err and not (tmp_path / "sft3").exists()
    # a second run into the same --out is refused, not a silent overwrite; --overwrite replaces it
    before = (out / "model" / "model.safetensors").stat().st_mtime_ns
    assert main(["train", "sft", "--recipe", "debug_cpu", "--data", str(data), "--out", str(out)]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (out / "model" / "model.safetensors").stat().st_mtime_ns == before
    assert main(["train", "sft", "--recipe", "debug_cpu", "--data", str(data), "--out", str(out),
                 "--overwrite", "--set", "sft.epochs=1", "--set", "log.tensorboard=false"]) == 0
    assert (out / "model" / "model.safetensors").stat().st_mtime_ns != before


def test_cli_sft_without_a_recipe_names_the_choices(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": _conversation()}) + "\n")
    assert main(["train", "sft", "--data", str(data), "--model", "Qwen/Qwen3-8B-Base",
                 "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "--recipe dr_kernel_8b" in err and "--recipe debug_cpu" in err and "toy" in err
    assert not (tmp_path / "o").exists()


def test_bad_sft_data_names_file_and_line_and_a_torn_last_line_is_skipped(tmp_path, caplog):
    good = json.dumps({"messages": _conversation()})
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good + "\n{not json\n" + good + "\n")
    with pytest.raises(ConfigError, match=r"bad\.jsonl:2: not a JSON object"):
        load_conversations(bad)
    torn = tmp_path / "torn.jsonl"
    torn.write_text(good + "\n" + good + "\n" + good[:40])  # a writer killed mid-line
    assert len(load_conversations(torn)) == 2
    assert "torn.jsonl:3: torn last line" in caplog.text
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text(json.dumps({"messages": ["hi"]}) + "\n")
    with pytest.raises(ConfigError, match="record 1: `messages` must be a list of"):
        load_conversations(wrong)


def test_sft_shows_progress_with_the_time_left(tmp_path):
    import io

    from drkernel.rl.progress import Progress

    model, tok = _tiny()
    cfg = SFTConfig(lr=1e-2, batch_size=1, micro_batch_size=1, epochs=3, max_length=128, warmup_ratio=0.0)
    stream = io.StringIO()
    run_sft(cfg, [_conversation()] * 2, model, tok, tmp_path, tensorboard=False,
            progress=Progress(stream, tty=False, interval_s=0.0))
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("sft: 1/6 steps") and "left" in lines[0] and "loss" in lines[0]
    assert lines[-1].startswith("sft: 6/6 steps") and "epoch 3/3" in lines[-1]


def test_sft_trains_on_what_each_turn_was_sent_when_the_history_was_cut(tmp_path):
    """A trajectory whose later turns saw a top-w context (or a shrunk prompt) becomes one
    conversation per turn: that turn's exact prompt (agent.trajectories.turn_prompt) and its answer."""
    from drkernel.agent.trajectories import turn_prompt

    ok = EvalResult(outcome=EvalOutcome.OK, compiled=True, correct=True, speedup=1.5)
    traj = Trajectory(problem="101_ReLU", sample=0, prompt=[{"role": "user", "content": "optimize here"}])
    for i in range(3):
        traj.turns.append(Turn(index=i, response=f"kernel {i}", code=None, extraction="none", result=ok,
                               reward=2.5, feedback=f"fast {i}", context=[] if i == 2 else None))
    assert not traj.messages_exact
    data = tmp_path / "cut.jsonl"
    save_trajectories(data, [traj])
    convs = load_conversations(data)
    assert len(convs) == 3
    for turn, conv in zip(traj.turns, convs, strict=True):
        assert conv[:-1] == turn_prompt(traj, turn)
        assert conv[-1] == {"role": "assistant", "content": turn.response}
    assert convs[2][:-1] == traj.prompt  # the third turn saw no earlier turn at all


def test_sft_data_that_is_a_folder_or_no_parquet_of_messages_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="is a folder"):
        load_conversations(tmp_path)
    (tmp_path / "junk.parquet").write_text("not parquet")
    with pytest.raises(ConfigError, match=r"junk\.parquet: not a parquet file with a `messages` column"):
        load_conversations(tmp_path / "junk.parquet")
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    pq.write_table(pa.Table.from_pylist([{"prompt": "x"}]), tmp_path / "rl.parquet")  # RL rows: no messages
    with pytest.raises(ConfigError, match=r"rl\.parquet: not a parquet file with a `messages` column"):
        load_conversations(tmp_path / "rl.parquet")


def test_cli_sft_refuses_a_negative_lora_rank_and_an_out_that_is_a_file(tmp_path, capsys):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": _conversation()}) + "\n")
    argv = ["train", "sft", "--recipe", "debug_cpu", "--data", str(data)]
    assert main([*argv, "--out", str(tmp_path / "o"), "--lora-rank", "-1"]) == 2
    assert "sft.lora_rank: must be >= 0" in capsys.readouterr().err  # it trained without LoRA before
    assert main([*argv, "--out", str(data)]) == 2
    err = capsys.readouterr().err
    assert f"--out {data}: is a file, not a folder" in err and "Traceback" not in err


@pytest.mark.parametrize("override, key", [
    ("sft.grad_clip=-1", "sft.grad_clip"),  # a negative clip flipped every gradient: ascent, silently
    ("sft.grad_clip=0", "sft.grad_clip"),
    ("sft.betas=1.5,0.9", "sft.betas"),  # torch's ValueError traceback once the model had loaded
    ("sft.weight_decay=-1", "sft.weight_decay"),
    ("sft.warmup_ratio=2", "sft.warmup_ratio"),  # the lr never reached sft.lr
    ("sft.lora_alpha=0", "sft.lora_alpha"),  # adapters scaled by 0: nothing learnt
])
def test_cli_sft_refuses_optimizer_settings_out_of_range(tmp_path, capsys, override, key):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": _conversation()}) + "\n")
    assert main(["train", "sft", "--recipe", "debug_cpu", "--data", str(data), "--out", str(tmp_path / "o"),
                 "--set", override]) == 2
    err = capsys.readouterr().err
    assert f"{key}: must be" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("content", [None, 42, [{"type": "text", "text": "hi"}]])
def test_sft_data_whose_content_is_no_text_names_the_record(tmp_path, content):
    messages = [*_conversation(), {"role": "user", "content": content}]
    data = tmp_path / "d.jsonl"
    lines = [json.dumps({"messages": _conversation()}), json.dumps({"messages": messages})]
    data.write_text("\n".join(lines) + "\n")
    # it was trained on as the text "None", "42" or the list's repr, silently
    with pytest.raises(ConfigError, match=r"d\.jsonl: record 2: message 5's content is not text"):
        load_conversations(data)
