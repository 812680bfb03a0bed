"""The training loop: SFT warm start (scripted demonstrations or recorded episodes), then GRPO/RLOO.

Global steps ``0 .. sft_steps-1`` are SFT steps, the rest RL steps. Each RL
step draws ``groups_per_step`` tasks (seeds) and, per group, one budget
(``group_budgets="shared"``) or one per rollout (``"mixed"``) from the
config's sampler, rolls out ``group_size`` episodes per task with the
current policy, and takes ``ppo_epochs`` passes of clipped policy-gradient
updates. Everything random is drawn from RNGs that the checkpoint saves, so
``resume`` reproduces an uninterrupted run's metrics exactly. A step's draws come
from streams keyed by ``(seed, phase, step)`` and the run's kernels, thread count
and deterministic algorithms are pinned (:mod:`budgetmix.training.data.reproducibility`),
so the same seed gives byte-identical checkpoints on any core count or load.

Data parallel: under ``accelerate launch`` every process rolls out its share
of the groups (``group % world == rank``) and gradients are averaged by
accelerate; the same command runs on one CPU or GPU.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
from budgetmix.environment import Task
from budgetmix.exceptions import CheckpointError, ConfigError
from budgetmix.policies.samplers import BudgetDraw
from budgetmix.training.algorithms import rl_groups
from budgetmix.training.algorithms.objectives import (
    group_advantages,
    policy_loss,
    sequence_batch,
    sft_loss,
    token_logprobs,
)
from budgetmix.training.algorithms.reference import KLReference
from budgetmix.training.config import TrainConfig
from budgetmix.training.data.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from budgetmix.training.data.metrics import MetricsLog, RolloutSummary, summarize, summary_of
from budgetmix.training.data.models import build_policy
from budgetmix.training.data.portable_sqrt import PortableAdamW
from budgetmix.training.data.provenance import write_run_fingerprint, write_training_env
from budgetmix.training.data.recordings import RecordedBatches
from budgetmix.training.data.reproducibility import keyed_generator as keyed_gen
from budgetmix.training.data.reproducibility import keyed_random, pin_kernels, reproducible
from budgetmix.training.envs import env_spec
from budgetmix.training.phase_progress import phase_lines, show_step
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import ModelGenerator, ScriptedGenerator
from budgetmix.training.rollouts.rollout import (
    EpisodeSpec,
    Rollout,
    RolloutSettings,
    TokenCheck,
    run_rollouts,
)

__all__ = ["TrainResult", "Trainer", "train"]


@dataclass(frozen=True, slots=True)
class TrainResult:
    """What a run produced: its metrics (one record per step) and where it wrote."""

    output_dir: Path
    steps_done: int
    metrics: list[dict[str, Any]]
    final_model_dir: Path | None
    evaluation: dict[str, Any] = field(default_factory=dict)


class Trainer:
    """One training run; :func:`train` is the usual entry point."""

    def __init__(self, config: TrainConfig, *, accelerator: Any = None) -> None:
        from accelerate import Accelerator

        pin_kernels()  # before torch's first kernel of the process (read once, then fixed)
        self.config = config
        self.acc = accelerator if accelerator is not None else Accelerator()
        self.world, self.rank = self.acc.num_processes, self.acc.process_index
        for name in ("groups_per_step", "sft_batch"):
            if getattr(config, name) % self.world:
                raise ConfigError(
                    f"TrainConfig.{name} must be divisible by the {self.world} processes"
                )
        self.out = Path(config.output_dir)
        model, self.tokenizer = build_policy(config)
        model.to(self.acc.device)
        params = [p for p in model.parameters() if p.requires_grad]
        # torch's AdamW with a root whose bits are the same on every x86 CPU (issue 28)
        optimizer = PortableAdamW(params, lr=config.sft_lr, weight_decay=config.weight_decay)
        self.model, self.optimizer = self.acc.prepare(model, optimizer)
        self.codec = ChatCodec.for_model(model, self.tokenizer)
        self.env = env_spec(config.env)
        self.recorded = RecordedBatches.from_config(config, model, self.tokenizer)
        self.sampler = config.budget_sampler()
        self.rng = keyed_random(config.seed, "start")  # re-keyed at every step (_key_streams)
        self.sample_gen = keyed_gen(config.seed, "start", self.rank)
        self.settings = RolloutSettings(
            notice_format=config.notice_format,
            max_new_tokens=config.max_new_tokens,
            max_total_tokens=config.max_total_tokens,
            token_check=cast(TokenCheck, config.token_check),
        )
        self.reference = KLReference(self.out, lora=config.lora is not False)
        self.step = 0
        self.rl_tokens = 0  # sampled in RL so far (the token_budget stopping rule)
        self.log = MetricsLog(self.out / "metrics.jsonl")
        self.rl_rollouts: Any = None  # specs -> rollouts instead of run_rollouts (ServerRollouts)

    # -- plumbing ------------------------------------------------------------------
    @property
    def policy(self) -> Any:
        """The model being trained, unwrapped from accelerate's distributed wrapper."""
        return self.acc.unwrap_model(self.model)

    def _generator_states(self) -> dict[str, torch.Tensor]:
        """Every process's sampling-generator state, collected on all processes."""
        mine = (self.rank, self.sample_gen.get_state().tolist())
        if self.world == 1:
            states = [mine]
        else:
            from accelerate.utils import gather_object

            states = list(gather_object([mine]))
        return {f"sample.rank{r}": torch.tensor(s, dtype=torch.uint8) for r, s in states}

    def _key_streams(self, phase: str) -> None:
        """This step's streams: the task/budget draws keyed by ``(seed, phase, step)`` (the
        same on every process), the sampling generator by that and the process's rank."""
        seed = self.config.seed
        self.rng = keyed_random(seed, phase, self.step)
        keyed_gen(seed, phase, self.step, self.rank, generator=self.sample_gen)

    def _task(self, seed: int) -> Task:
        return self.env.make_tasks([seed], self.config.env_kwargs)[0]

    def _set_lr(self, base: float, phase_step: int, rl: bool = False) -> float:
        lr = rl_groups.scheduled_lr(self.config, base, phase_step, self.rl_tokens if rl else None)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _gather(self, rows: list[RolloutSummary]) -> list[RolloutSummary]:
        if self.world == 1:
            return rows
        from accelerate.utils import gather_object

        return list(gather_object(rows))

    def _model_generator(self) -> ModelGenerator:
        return ModelGenerator(
            self.policy,
            eos_token_id=self.codec.eos_token_id,
            stop_token_ids=self.codec.stop_token_ids,
            pad_token_id=int(self.tokenizer.pad_token_id),
            temperature=self.config.temperature,
            batch_size=self.config.rollout_batch_size,
            generator=self.sample_gen,
        )

    # -- checkpoints -----------------------------------------------------------------
    def save(self) -> None:
        """Write ``<output_dir>/checkpoint`` atomically (main process; all processes wait)."""
        states = self._generator_states()
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            scalars: dict[str, Any] = {"config": self.config.to_dict()}
            if self.reference.sha256 is not None:
                scalars["reference_sha256"] = self.reference.sha256
            save_checkpoint(
                self.out / "checkpoint",
                model=self.policy,
                optimizer=self.optimizer,
                rng=self.rng,
                rng_tensors=states,
                step=self.step,
                scalars=scalars,
            )
        self.acc.wait_for_everyone()

    def resume(self) -> Path:
        """Load the checkpoint in ``<output_dir>``; returns the directory it came from.

        Raises:
            CheckpointError: there is no checkpoint to resume (the message names
                ``output_dir``), or a file of it is damaged (the message names the file).
            ConfigError: the checkpoint was written by a different config.
        """
        ckpt = latest_checkpoint(self.out)
        if ckpt is None:
            raise CheckpointError(
                f"resume: nothing to resume in {str(self.out)!r} (no complete checkpoint "
                "there); run without --resume to start a fresh run",
                self.out,
            )
        state = load_checkpoint(ckpt, model=self.policy, optimizer=self.optimizer, rng=self.rng)
        saved = dict(state.scalars.get("config", {}))
        mine = self.config.to_dict()
        # a run directory may be moved (output_dir) and watched or not (progress)
        diff = sorted(
            k for k in mine if k not in ("progress", "output_dir") and saved.get(k) != mine[k]
        )
        if diff:
            raise ConfigError(f"resume: checkpoint config differs in {', '.join(diff)}")
        key = f"sample.rank{self.rank}"
        if key not in state.tensors:
            raise ConfigError(f"resume: checkpoint has no sampler state for process {self.rank}")
        self.sample_gen.set_state(state.tensors[key])
        self.step = state.step
        self.log.truncate_after(self.step - 1)
        self.rl_tokens = rl_groups.rl_tokens_logged(self.log.read())
        if self.step > self.config.sft_steps and self.config.kl_coef > 0:
            self.reference.load(self.policy, state.scalars.get("reference_sha256"))
        return ckpt

    # -- steps ------------------------------------------------------------------------
    def _local(self, specs: Sequence[EpisodeSpec]) -> list[EpisodeSpec]:
        return [s for s in specs if s.group % self.world == self.rank]

    def _update(self, rollouts: list[Rollout], loss_fn: Any) -> dict[str, float]:
        """One optimizer step per minibatch; returns mean loss statistics."""
        size = self.config.minibatch_size
        stats: dict[str, list[float]] = {}
        for start in range(0, len(rollouts), size):
            chunk = rollouts[start : start + size]
            batch = sequence_batch(chunk, int(self.tokenizer.pad_token_id))
            logp = token_logprobs(self.model, batch, temperature=self.config.temperature)
            loss, extra = loss_fn(chunk, batch, logp, start)
            self.acc.backward(loss)
            if self.config.max_grad_norm:
                self.acc.clip_grad_norm_(self.model.parameters(), self.config.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            for k, v in {"loss": float(loss.detach()), **extra}.items():
                stats.setdefault(k, []).append(v)
        return {k: sum(v) / len(v) for k, v in stats.items()}

    def sft_step(self) -> dict[str, Any]:
        """One supervised step on scripted demonstrations or recorded episodes (sft_data)."""
        cfg = self.config
        self._key_streams("sft")
        lr = self._set_lr(cfg.sft_lr, self.step)
        agent_seed = self.rng.randrange(2**31) + self.rank
        specs = [
            EpisodeSpec(
                task=self._task(self.rng.randrange(cfg.num_train_seeds)),
                budget=self.sampler.sample(self.rng),
                group=i,
            )
            for i in range(cfg.sft_batch)
        ]
        if self.recorded is not None:  # sft_data: recorded episodes, not a demonstrator
            demos = self.recorded.batch(self.rng, cfg.sft_batch, self.world, self.rank)
        else:
            agent = self.env.make_demo_agent(cfg.env_kwargs, cfg.sft_error_rate, agent_seed)
            generator = ScriptedGenerator(agent, self.codec)
            demos = run_rollouts(self._local(specs), generator, self.codec, self.settings)

        def loss_fn(chunk: list[Rollout], batch: Any, logp: torch.Tensor, start: int) -> Any:
            mask = batch.loss_mask.to(logp.device)
            return sft_loss(logp, mask), {}

        stats = self._update(demos, loss_fn)
        return {
            "phase": "sft",
            "lr": lr,
            "sft_loss": stats["loss"],
            **_prefixed("demo_", summarize(self._gather([summary_of(d) for d in demos]))),
        }

    def _rl_specs(self) -> list[EpisodeSpec]:
        """One step's groups, one task each, budgets per ``group_budgets`` (rl_groups)."""
        return rl_groups.group_specs(self.config, self._task, self.sampler, self.rng)

    def rl_step(self) -> dict[str, Any]:
        """One GRPO/RLOO step: rollouts under drawn budgets, advantages, clipped updates."""
        cfg = self.config
        if self.step == cfg.sft_steps:
            self.optimizer.state.clear()  # SFT moments do not belong to the RL objective
            if cfg.kl_coef > 0:
                self.reference.snapshot(
                    self.policy, fold=bool(cfg.sft_steps), main=self.acc.is_main_process
                )
        lr = self._set_lr(cfg.lr, self.step - cfg.sft_steps, rl=True)
        self._key_streams("rl")
        t0 = time.perf_counter()  # timings are logged only: no timer changes what is trained
        specs = self._local(self._rl_specs())
        rollouts = (  # in-process, or through a server (training/serving/server_rollout.py)
            self.rl_rollouts(specs)
            if self.rl_rollouts is not None
            else run_rollouts(specs, self._model_generator(), self.codec, self.settings)
        )
        t_rollout = time.perf_counter() - t0
        summary = summarize(self._gather([summary_of(r) for r in rollouts]))
        self.rl_tokens += int(summary["sampled_tokens"])
        rollouts, keys = rl_groups.select_for_update(rollouts, cfg, self.world, summary)
        if not rollouts:  # every set had equal rewards: nothing to learn from, no update
            return {"phase": "rl", "lr": lr, **summary, "skipped_update": 1}
        return {
            "phase": "rl",
            "lr": lr,
            **self._rl_update(rollouts, keys),
            **summary,
            "time_rollout_s": t_rollout,
            "time_rollout_tokens_per_s": summary["sampled_tokens"] / max(t_rollout, 1e-9),
        }

    def _rl_update(self, rollouts: list[Rollout], keys: list[int]) -> dict[str, float]:
        """Advantages over the baseline sets ``keys``, then ``ppo_epochs`` clipped updates."""
        cfg, t1 = self.config, time.perf_counter()
        adv = group_advantages(
            [r.reward for r in rollouts],
            keys,
            estimator="rloo" if cfg.algorithm == "rloo" else "grpo",
            scale_rewards=cfg.scale_rewards,
        )
        advantages = torch.tensor(adv, dtype=torch.float32)
        # One epoch over one minibatch: the policy has not moved yet, so the old log-probs
        # are the current ones (detached) and a second forward pass would be wasted.
        on_policy = cfg.ppo_epochs == 1 and len(rollouts) <= cfg.minibatch_size
        old = None if on_policy else self._frozen_logprobs(rollouts, self.policy)
        ref = self._reference_logprobs(rollouts)

        def loss_fn(chunk: list[Rollout], batch: Any, logp: torch.Tensor, start: int) -> Any:
            dev = logp.device
            sl = slice(start, start + len(chunk))
            width = logp.shape[1]
            out = policy_loss(
                logp,
                logp.detach() if old is None else old[sl][:, :width].to(dev),
                advantages[sl].to(dev),
                batch.loss_mask.to(dev),
                clip_eps=cfg.clip_eps,
                clip_eps_high=cfg.clip_eps_high,
                ref_logprobs=None if ref is None else ref[sl][:, :width].to(dev),
                kl_coef=cfg.kl_coef,
            )
            return out.loss, {"kl": out.kl, "clip_fraction": out.clip_fraction}

        stats: dict[str, float] = {}
        for _ in range(cfg.ppo_epochs):
            stats = self._update(rollouts, loss_fn)
        return {**stats, "time_update_s": time.perf_counter() - t1}

    def _reference_logprobs(self, rollouts: list[Rollout]) -> torch.Tensor | None:
        """Log-probs under the KL reference (``None`` without one)."""
        with self.reference.scoring(self.policy) as model:
            return None if model is None else self._frozen_logprobs(rollouts, model)

    @torch.no_grad()
    def _frozen_logprobs(self, rollouts: list[Rollout], model: Any) -> torch.Tensor:
        """Log-probs under ``model`` now, padded to the widest rollout (old/ref terms)."""
        width = max(len(r.prompt_ids) + len(r.response_ids) for r in rollouts) - 1
        out = torch.zeros((len(rollouts), width))
        size = self.config.minibatch_size
        for start in range(0, len(rollouts), size):
            chunk = rollouts[start : start + size]
            batch = sequence_batch(chunk, int(self.tokenizer.pad_token_id))
            lp = token_logprobs(model, batch, temperature=self.config.temperature).cpu()
            out[start : start + len(chunk), : lp.shape[1]] = lp
        return out

    # -- driver -----------------------------------------------------------------------
    def run(self, *, stop_after: int | None = None) -> TrainResult:
        """Train to the configured step count (or stop after ``stop_after`` steps, in tests),
        under the run's pinned threads and deterministic algorithms."""
        with reproducible(self.config.threads):
            return self._run(stop_after)

    def _run(self, stop_after: int | None) -> TrainResult:
        from rich.progress import Progress

        cfg = self.config
        total = cfg.sft_steps + cfg.steps
        watched = cfg.progress and self.acc.is_main_process
        lines = phase_lines(cfg, self.step, watched, self.rl_tokens)  # piped: a line a while
        self.model.train()
        with Progress(disable=not watched) as bar:
            task = bar.add_task("train", total=total, completed=self.step)
            while self.step < total:
                total = self.step if 0 < (cfg.token_budget or 0) <= self.rl_tokens else total
                if (stop_after is not None and self.step >= stop_after) or self.step >= total:
                    break
                record = self._one_step(lines)
                show_step(cfg, self.step, self.rl_tokens, record, lines, bar, task)
                if self.step % cfg.save_every == 0 or self.step == total:
                    self.save()
        return self._result(total)

    def _one_step(self, lines: Sequence[Any]) -> dict[str, Any]:
        """Take the next SFT or RL step and log it; its record."""
        cfg = self.config
        if self.step == cfg.sft_steps and cfg.sft_steps:
            lines[1].begin()  # the RL phase's own clock: its ETA leaves SFT's time out
        record = self.sft_step() if self.step < cfg.sft_steps else self.rl_step()
        record = {"step": self.step, **record}
        if self.acc.is_main_process:
            self.log.write(record)
        self.step += 1
        return record

    def _result(self, total: int) -> TrainResult:
        """The run's result; a finished run (``total`` steps) saves, evaluates, fingerprints."""
        cfg = self.config
        final = None
        evaluation: dict[str, Any] = {}
        if self.step >= total:
            final = self._save_final()
            if cfg.eval_episodes:
                evaluation = self.evaluate(cfg.eval_episodes)
            if self.acc.is_main_process:  # <output_dir>/fingerprint.json
                inputs = (cfg.model_path, cfg.sft_data, cfg.chat_template)
                write_run_fingerprint(self.out, cfg.to_dict(), threads=cfg.threads, data=inputs)
        return TrainResult(self.out, self.step, self.log.read(), final, evaluation)

    def _save_final(self) -> Path | None:
        """Write ``<output_dir>/final`` (a whole model, with a manifest) atomically."""
        from budgetmix.manifest import publish_directory, stage_directory

        self.acc.wait_for_everyone()
        if not self.acc.is_main_process:
            return None
        d = self.out / "final"
        staged = stage_directory(d)
        policy = self.policy
        if self.config.lora is not False:
            # ship a whole model that from_pretrained (and load_pretrained) can open; the
            # adapter alone goes next to it, for users who keep base and adapter apart, unless
            # the SFT adapter was folded into the base (then it would not fit their base)
            import copy

            if not (self.reference.is_base and self.config.sft_steps):
                policy.save_pretrained(str(staged / "adapter"), safe_serialization=True)
            policy = copy.deepcopy(policy).merge_and_unload()
        policy.save_pretrained(str(staged), safe_serialization=True)
        self.tokenizer.save_pretrained(str(staged))
        write_training_env(
            staged,
            self.config.env,
            self.config.env_kwargs,
            notice_format=self.settings.notice_format,
            notice_placement=self.settings.notice_placement,
            tool_call_format=self.codec.template.tool_call_format,  # the parser trained with
        )
        return publish_directory(staged, d)

    def evaluate(self, episodes_per_budget: int) -> dict[str, Any]:
        """Success per budget (``eval_budgets`` or the sampler's support) on held-out seeds."""
        cfg_budgets = self.config.eval_budgets
        gen_state = self.sample_gen.get_state()
        keyed_gen(self.config.seed, "eval", self.rank, generator=self.sample_gen)
        seeds = range(
            self.config.num_train_seeds, self.config.num_train_seeds + episodes_per_budget
        )
        specs = [
            EpisodeSpec(task=self._task(s), budget=BudgetDraw(turns=t, sampler="eval"), group=i)
            for t in (cfg_budgets or self.sampler.support())
            for i, s in enumerate(seeds)
        ]
        rollouts = run_rollouts(
            self._local(specs), self._model_generator(), self.codec, self.settings
        )
        self.sample_gen.set_state(gen_state)
        return summarize(self._gather([summary_of(r) for r in rollouts]))


def _prefixed(prefix: str, data: dict[str, Any]) -> dict[str, Any]:
    keep = ("success", "turns", "exhaustion_rate")
    return {prefix + k: data[k] for k in keep}


def train(
    config: TrainConfig, *, resume: bool = False, stop_after: int | None = None
) -> TrainResult:
    """Run (or, with ``resume``, continue) the training ``config`` describes.

    ``stop_after`` ends the run after that many global steps without the final
    save (to simulate a killed run in tests).

    Raises:
        ConfigError: an invalid config, or ``resume`` onto a checkpoint of another config.
        CheckpointError: ``resume`` with no checkpoint in ``output_dir`` (the message names
            it), or onto a damaged checkpoint (the message names the file).
        MissingExtraError: torch/transformers/accelerate are not installed.
    """
    with reproducible(config.threads, seed=config.seed):
        trainer = Trainer(config)
        if resume:
            trainer.resume()
        elif trainer.acc.is_main_process and trainer.log.path.exists():
            trainer.log.path.unlink()  # a fresh run starts a fresh log
        trainer.acc.wait_for_everyone()
        return trainer.run(stop_after=stop_after)
