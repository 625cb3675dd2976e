#!/usr/bin/env bash
# The paper's multi-turn RL recipe on verl 0.9 (docs/paper_spec.md §5-§9.3).
# Sourced by run_8b.sh / run_14b.sh.
# Needs: MODEL (your cold-start SFT checkpoint), TRAIN/VAL (parquet, layout in README.md),
# JUDGE_URL (a `drkernel serve` on the judge GPUs), NNODES, a Ray cluster (README.md).
# DRY_RUN=1 prints verl's Hydra overrides, one per line, instead of launching (tests/rl/test_verl_recipe.py
# composes and validates them with verl's own config code).
set -euo pipefail
: "${MODEL:?set MODEL to the cold-start SFT checkpoint}" "${TRAIN:?}" "${VAL:?}" "${JUDGE_URL:?}"
NNODES=${NNODES:-1}; GPUS_PER_NODE=${GPUS_PER_NODE:-8}; SP=${SP:-4}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Hydra reads a list element with '=' or ':' only when it is quoted inside the override.
OVERRIDES=(
  trainer.use_v1=true trainer.v1.trainer_mode=drkernel
  "+drkernel.recipe=${RECIPE}"
  "+drkernel.overrides=['judge.executor=http','judge.base_url=${JUDGE_URL}','reward=paper']"
  "data.train_files=${TRAIN}" "data.val_files=${VAL}"
  data.train_batch_size=16 data.max_prompt_length=10240 data.max_response_length=8192
  "actor_rollout_ref.model.path=${MODEL}" actor_rollout_ref.model.enable_gradient_checkpointing=true
  actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.mode=async
  actor_rollout_ref.rollout.n=16 actor_rollout_ref.rollout.temperature=1.0
  actor_rollout_ref.rollout.top_p=1.0 actor_rollout_ref.rollout.top_k=-1
  actor_rollout_ref.rollout.prompt_length=10240 actor_rollout_ref.rollout.response_length=8192
  actor_rollout_ref.rollout.calculate_log_probs=true
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 actor_rollout_ref.rollout.gpu_memory_utilization=0.75
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1
  actor_rollout_ref.rollout.agent.default_agent_loop=drkernel_kernel
  "actor_rollout_ref.rollout.agent.agent_loop_config_path=${HERE}/agent_loop.yaml"
  actor_rollout_ref.rollout.val_kwargs.n=8 actor_rollout_ref.rollout.val_kwargs.temperature=1.0
  actor_rollout_ref.rollout.val_kwargs.top_p=0.95
  algorithm.adv_estimator=drkernel_trloo algorithm.gamma=1.0 algorithm.use_kl_in_reward=false
  actor_rollout_ref.actor.policy_loss.loss_mode=drkernel
  actor_rollout_ref.actor.clip_ratio_low=0.2 actor_rollout_ref.actor.clip_ratio_high=0.28
  actor_rollout_ref.actor.clip_ratio_c=3.0
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm actor_rollout_ref.actor.loss_scale_factor=1000
  actor_rollout_ref.actor.use_kl_loss=false actor_rollout_ref.actor.kl_loss_coef=0
  actor_rollout_ref.actor.entropy_coeff=0
  actor_rollout_ref.actor.ppo_epochs=1 actor_rollout_ref.actor.ppo_mini_batch_size=16
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1
  actor_rollout_ref.actor.optim.lr=1e-6 actor_rollout_ref.actor.optim.weight_decay=0.01
  actor_rollout_ref.actor.optim.lr_warmup_steps=0 actor_rollout_ref.actor.grad_clip=1.0
  "actor_rollout_ref.actor.ulysses_sequence_parallel_size=${SP}"
  actor_rollout_ref.actor.fsdp_config.param_offload=true actor_rollout_ref.actor.fsdp_config.optimizer_offload=true
  "trainer.nnodes=${NNODES}" "trainer.n_gpus_per_node=${GPUS_PER_NODE}"
  trainer.total_training_steps=300 trainer.test_freq=10 trainer.save_freq=10
  trainer.project_name=drkernel "trainer.experiment_name=${RECIPE}"
)

if [[ -n "${DRY_RUN:-}" ]]; then
  printf '%s\n' "${OVERRIDES[@]}" "$@"
  exit 0
fi
python -m verl.trainer.main_ppo "${OVERRIDES[@]}" "$@"
