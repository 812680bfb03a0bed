"""budgetmix episodes inside verl's agent loop: ``BudgetmixAgentLoop`` (agent name ``budgetmix``).

Import this module only inside a verl job (it subclasses verl's ``AgentLoopBase``;
written against verl 0.9.1, ``verl.experimental.agent_loop``). Each ``run`` call plays
one budget-aware episode of the configured environment in the trained chat layout
(:func:`~budgetmix.training.rollouts.rollout.run_rollouts`), every turn sampled by verl's
server manager (``await server_manager.generate(request_id=..., prompt_ids=...,
sampling_params=...)``, token ids in and out, one request id per episode so its
turns stick to one server's prefix cache), and returns verl's ``AgentLoopOutput``:
``prompt_ids``, ``response_ids`` / ``response_mask`` (1 on sampled ids, 0 on the
environment's), ``response_logprobs`` (when verl asked for them), ``reward_score``
(the budget-aware reward), ``num_turns`` and ``extra_fields`` (``budget_turns``,
``termination``, ``success``).

Configure it in the file verl reads from
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` (hydra passes the extra
keys to ``__init__``)::

    - name: budgetmix
      _target_: budgetmix.training.engines.verl_agent_loop.BudgetmixAgentLoop
      env: echo
      env_kwargs: {letters: abcd, min_len: 1, max_len: 3}
      sampler: {kind: budgetmix, ceiling: 4}
      max_new_tokens: 8

and give each dataset row ``agent_name: budgetmix`` and ``extra_info: {seed: <task
seed>}``. The budget is drawn per GRPO group (verl's ``uid``) with
``group_budgets="shared"``, per trajectory with ``"mixed"``.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

from budgetmix.exceptions import ConfigError
from budgetmix.policies.samplers import sampler_from_config
from budgetmix.training.envs import env_spec
from budgetmix.training.rollouts.chat import ChatCodec
from budgetmix.training.rollouts.generation import GenerationRequest
from budgetmix.training.rollouts.rollout import EpisodeSpec, Rollout, RolloutSettings, run_rollouts
from budgetmix.training.rollouts.sampler import Generation

try:
    from verl.experimental.agent_loop.agent_loop import (  # type: ignore[import-not-found]
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
        register,
    )
except ImportError as exc:  # pragma: no cover - the module is for verl jobs only
    raise ImportError(
        "budgetmix.training.engines.verl_agent_loop runs inside verl's agent loop: install verl "
        "(written against verl 0.9.1) in the job's environment"
    ) from exc

__all__ = ["BudgetmixAgentLoop", "ServerManagerGenerator"]


class ServerManagerGenerator:
    """A :class:`~budgetmix.training.rollouts.generation.TokenGenerator` over verl's server manager.

    Called from a worker thread while ``loop`` (verl's event loop) awaits it: each
    request becomes ``server_manager.generate(...)`` run on ``loop``; ids as returned
    (vLLM and SGLang include the stop id), log-probs as returned or 0.0.
    """

    def __init__(
        self,
        server_manager: Any,
        loop: asyncio.AbstractEventLoop,
        *,
        request_id: str,
        sampling_params: Mapping[str, Any],
        stop_token_ids: Sequence[int],
    ) -> None:
        self.server_manager, self.loop, self.request_id = server_manager, loop, request_id
        asked = [int(t) for t in sampling_params.get("stop_token_ids") or []]
        self.stop_ids = frozenset([*asked, *stop_token_ids])
        self.params = {**sampling_params, "stop_token_ids": sorted(self.stop_ids)}
        self.generate_seconds = 0.0
        self.had_logprobs = True

    def generate(
        self, requests: Sequence[GenerationRequest], max_new_tokens: int
    ) -> list[Generation]:
        """One server request per episode request, in order."""
        return [self._one(list(r.context_ids), max_new_tokens) for r in requests]

    def _one(self, prompt_ids: list[int], max_new_tokens: int) -> Generation:
        t0 = time.perf_counter()
        call = self.server_manager.generate(
            request_id=self.request_id,
            prompt_ids=prompt_ids,
            sampling_params={**self.params, "max_tokens": max_new_tokens},
        )
        out = asyncio.run_coroutine_threadsafe(call, self.loop).result()
        self.generate_seconds += time.perf_counter() - t0
        ids = tuple(int(t) for t in out.token_ids)
        if len(ids) > max_new_tokens:
            raise ConfigError(f"the server returned {len(ids)} ids for max_tokens={max_new_tokens}")
        if out.log_probs:
            lps = tuple(float(x) for x in out.log_probs)
        else:
            self.had_logprobs, lps = False, (0.0,) * len(ids)
        return Generation(ids=ids, logprobs=lps, stopped=bool(ids) and ids[-1] in self.stop_ids)


@register("budgetmix")
class BudgetmixAgentLoop(AgentLoopBase):  # type: ignore[misc]
    """verl agent loop playing one budgetmix episode per ``run`` (see the module doc).

    Raises:
        ConfigError: a bad ``env``, ``sampler``, ``group_budgets`` or limit (at
            construction); at ``run``, a row without ``extra_info.seed``, or a prompt longer
            than verl's ``rollout.prompt_length``.
    """

    def __init__(
        self,
        *args: Any,
        env: str = "echo",
        env_kwargs: Mapping[str, Any] | None = None,
        sampler: Mapping[str, Any] | None = None,
        notice_format: str = "v1",
        max_new_tokens: int = 32,
        max_total_tokens: int = 4096,
        group_budgets: str = "shared",
        seed: int = 0,
        token_check: str = "off",
        tools: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        if group_budgets not in ("shared", "mixed"):
            raise ConfigError(f"group_budgets must be shared or mixed, got {group_budgets!r}")
        self.env = env_spec(env)
        self.env_kwargs = dict(env_kwargs or {})
        self.sampler = sampler_from_config(dict(sampler or {"kind": "budgetmix", "ceiling": 4}))
        self.group_budgets, self.seed = group_budgets, int(seed)
        self.settings = RolloutSettings(
            notice_format=notice_format,
            max_new_tokens=int(max_new_tokens),
            max_total_tokens=int(max_total_tokens),
            token_check=token_check,  # type: ignore[arg-type]
        )
        self.codec = ChatCodec(self.tokenizer)

    def _spec(self, kwargs: Mapping[str, Any]) -> EpisodeSpec:
        extra = kwargs.get("extra_info") or {}
        if "seed" not in extra:
            raise ConfigError("a budgetmix row needs extra_info.seed (the task seed)")
        task = self.env.make_tasks([int(extra["seed"])], self.env_kwargs)[0]
        uid = kwargs.get("uid")
        if self.group_budgets == "shared" and uid is not None:
            rng = random.Random(f"{self.seed}:{uid}")  # one budget per GRPO group
        else:
            rng = random.Random()
        return EpisodeSpec(task=task, budget=self.sampler.sample(rng), group=0)

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        """Play one episode; verl's ``AgentLoopOutput``."""
        spec = self._spec(kwargs)
        request_id = f"budgetmix-{kwargs.get('uid', '')}-{random.getrandbits(64):016x}"
        gen = ServerManagerGenerator(
            self.server_manager,
            asyncio.get_running_loop(),
            request_id=request_id,
            sampling_params=sampling_params,
            stop_token_ids=self.codec.stop_token_ids,
        )
        loop = asyncio.get_running_loop()
        (rollout,) = await loop.run_in_executor(
            None, lambda: run_rollouts([spec], gen, self.codec, self.settings)
        )
        return self._output(rollout, gen)

    def _output(self, r: Rollout, gen: ServerManagerGenerator) -> Any:
        limit = int(self.rollout_config.prompt_length)
        if len(r.prompt_ids) > limit:
            raise ConfigError(
                f"the episode's prompt has {len(r.prompt_ids)} ids, over verl's "
                f"rollout.prompt_length={limit}"
            )
        cap = int(self.rollout_config.response_length)
        return AgentLoopOutput(
            prompt_ids=list(r.prompt_ids),
            response_ids=list(r.response_ids[:cap]),
            response_mask=list(r.response_mask[:cap]),
            response_logprobs=list(r.logprobs[:cap]) if gen.had_logprobs else None,
            reward_score=float(r.reward),
            num_turns=sum(1 for m in r.messages if m.get("role") != "system"),
            metrics=AgentLoopMetrics(generate_sequences=gen.generate_seconds),
            extra_fields={
                "budget_turns": r.budget.turns,
                "termination": r.termination,
                "success": r.success,
                "truncated": len(r.response_ids) > cap,
                "turn_scores": [],
                "tool_rewards": [],
            },
        )
