"""Multi-turn rollouts sampled by vLLM through TRL's own handles (``GRPOConfig(use_vllm=True)``).

With ``use_vllm=True`` a ``GRPOTrainer`` holds ``trainer.vllm_generation`` (TRL's
``VLLMGeneration``) and keeps vLLM's weights in sync with the policy before it
calls ``rollout_func`` (``sync_weights``, then a prefix-cache reset). Its own
``generate`` is single-turn (one ``max_completion_length`` for the whole
completion), so :func:`trl_vllm_generator` goes one level down and asks for each
turn of every active episode separately, token ids in, token ids out:

* ``vllm_mode="server"``: TRL's ``VLLMClient.generate`` (``/v1/completions`` of a
  ``vllm serve`` server, prompts as token ids, ``return_token_ids``). The main
  process uses the trainer's client; the other processes open a client of their
  own on the same server (generation needs no weight-transfer group).
* ``vllm_mode="colocate"``: the trainer's in-process ``vllm.LLM`` with ``prompt_token_ids``
  prompts.

Both sample with TRL's settings (``temperature``, ``top_p``, ``top_k``, ``min_p``,
``repetition_penalty``, ``generation_kwargs``), stop at the chat template's stop ids
(``stop_token_ids``, included in the returned ids by vLLM), and return the
log-prob vLLM gave each sampled id. vLLM's prefix cache plays the part of
:class:`~budgetmix.training.rollouts.generation.ModelGenerator`'s KV cache across turns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from budgetmix.exceptions import ConfigError, MissingExtraError
from budgetmix.training.rollouts.generation import GenerationRequest
from budgetmix.training.rollouts.sampler import Generation

__all__ = [
    "Completion",
    "EngineGenerator",
    "client_completer",
    "llm_completer",
    "trl_vllm_generator",
]

#: What an engine returns for one prompt: the sampled ids and, per id, the log-probs of
#: the ids it ranked at that position (``ranked_ids``) in the same order.
Completion = tuple[Sequence[int], Sequence[Sequence[float | None]], Sequence[Sequence[int]]]

#: ``complete(prompts, max_new_tokens)``: one :data:`Completion` per token-id prompt.
Completer = Callable[[list[list[int]], int], Sequence[Completion]]


def _sampled_logprob(token: int, logprobs: Sequence[float | None], ids: Sequence[int]) -> float:
    for value, ranked in zip(logprobs, ids, strict=True):
        if ranked == token:
            if value is None:
                raise ConfigError(f"the engine returned no log-prob for sampled id {token}")
            return float(value)
    raise ConfigError(f"the engine returned no log-prob for sampled id {token}")


class EngineGenerator:
    """A :class:`~budgetmix.training.rollouts.generation.TokenGenerator` over an inference engine.

    ``complete`` sends every active episode's context ids at once (one turn) and
    returns what the engine sampled; a response is ``stopped`` when its last id is
    one of ``stop_token_ids``.

    Raises:
        ConfigError: no stop id; at generation, an engine answer of the wrong
            length, over ``max_new_tokens``, or without the sampled ids' log-probs.
    """

    def __init__(self, complete: Completer, *, stop_token_ids: Sequence[int]) -> None:
        if not stop_token_ids:
            raise ConfigError("EngineGenerator: give stop_token_ids")
        self.complete = complete
        self.stop_ids = frozenset(int(t) for t in stop_token_ids)

    def generate(
        self, requests: Sequence[GenerationRequest], max_new_tokens: int
    ) -> list[Generation]:
        """One engine call for all ``requests``; their generations in request order."""
        answers = self.complete([list(r.context_ids) for r in requests], max_new_tokens)
        if len(answers) != len(requests):
            raise ConfigError(f"the engine answered {len(answers)} of {len(requests)} prompts")
        out = []
        for ids, logprobs, ranked in answers:
            sampled = tuple(int(t) for t in ids)
            if len(sampled) > max_new_tokens or len(logprobs) != len(sampled):
                raise ConfigError(
                    f"the engine returned {len(sampled)} ids and {len(logprobs)} log-probs "
                    f"for at most {max_new_tokens} new tokens"
                )
            lps = tuple(
                _sampled_logprob(t, lp, r)
                for t, lp, r in zip(sampled, logprobs, ranked, strict=True)
            )
            stopped = bool(sampled) and sampled[-1] in self.stop_ids
            out.append(Generation(ids=sampled, logprobs=lps, stopped=stopped))
        return out


def _sampling(vllm_generation: Any) -> dict[str, Any]:
    """TRL's sampling settings of ``vllm_generation`` (its ``GRPOConfig``'s values)."""
    return {
        "temperature": float(getattr(vllm_generation, "temperature", 1.0)),
        "top_p": float(getattr(vllm_generation, "top_p", 1.0)),
        "top_k": int(getattr(vllm_generation, "top_k", 0)),
        "min_p": float(getattr(vllm_generation, "min_p", None) or 0.0),
        "repetition_penalty": float(getattr(vllm_generation, "repetition_penalty", 1.0)),
    }


def client_completer(
    client: Any,
    *,
    stop_token_ids: Sequence[int],
    sampling: dict[str, Any] | None = None,
    generation_kwargs: dict[str, Any] | None = None,
) -> Completer:
    """A :data:`Completer` over TRL's ``VLLMClient`` (``client.generate``, server mode)."""
    extra = {**(generation_kwargs or {}), "stop_token_ids": sorted(int(t) for t in stop_token_ids)}

    def complete(prompts: list[list[int]], max_new_tokens: int) -> list[Completion]:
        out = client.generate(
            prompts=prompts,
            n=1,
            max_tokens=max_new_tokens,
            logprobs=0,
            generation_kwargs=extra,
            **(sampling or {}),
        )
        if out.get("logprobs") is None:
            raise ConfigError("the vLLM server returned no logprobs for a request with logprobs=0")
        ranked = out["logprob_token_ids"]
        return list(zip(out["completion_ids"], out["logprobs"], ranked, strict=True))

    return complete


def llm_completer(
    llm: Any,
    *,
    stop_token_ids: Sequence[int],
    sampling: dict[str, Any] | None = None,
    generation_kwargs: dict[str, Any] | None = None,
) -> Completer:
    """A :data:`Completer` over an in-process ``vllm.LLM`` (TRL's colocate mode)."""
    try:
        from trl.generation.vllm_generation import extract_logprobs
        from vllm import SamplingParams  # type: ignore[import-not-found]
    except ImportError as exc:  # pragma: no cover - needs vLLM (bench/gpu)
        raise MissingExtraError("vllm", "trl") from exc
    stops = sorted(int(t) for t in stop_token_ids)

    def complete(prompts: list[list[int]], max_new_tokens: int) -> list[Completion]:
        params = SamplingParams(
            n=1,
            max_tokens=max_new_tokens,
            logprobs=0,
            **(sampling or {}),
            **{**(generation_kwargs or {}), "stop_token_ids": stops},
        )
        outputs = llm.generate(
            [{"prompt_token_ids": p} for p in prompts], sampling_params=params, use_tqdm=False
        )
        logprobs, ranked = extract_logprobs(outputs)
        if logprobs is None:
            raise ConfigError("vllm.LLM returned no logprobs for a request with logprobs=0")
        ids = [list(o.outputs[0].token_ids) for o in outputs]
        return list(zip(ids, logprobs, ranked, strict=True))

    return complete


def trl_vllm_generator(trainer: Any, *, stop_token_ids: Sequence[int]) -> EngineGenerator:
    """An :class:`EngineGenerator` over ``trainer.vllm_generation`` (server or colocate).

    Raises:
        ConfigError: the trainer has no vLLM (``use_vllm=False``), an unknown mode, or
            colocate with ``vllm_enable_sleep_mode`` (the engine sleeps between TRL's
            own generations; a multi-turn rollout would find it without weights).
    """
    vg = getattr(trainer, "vllm_generation", None)
    if vg is None:
        raise ConfigError("use_vllm=True needs a GRPOTrainer built with GRPOConfig(use_vllm=True)")
    sampling, extra = _sampling(vg), dict(getattr(vg, "generation_kwargs", None) or {})
    if vg.mode == "server":
        client = getattr(vg, "vllm_client", None) or _rank_client(vg)
        complete = client_completer(
            client, stop_token_ids=stop_token_ids, sampling=sampling, generation_kwargs=extra
        )
    elif vg.mode == "colocate":
        if getattr(vg, "enable_sleep_mode", False):
            raise ConfigError(
                "vllm_enable_sleep_mode is not supported by multi-turn rollouts; set it to False"
            )
        complete = llm_completer(
            vg.llm, stop_token_ids=stop_token_ids, sampling=sampling, generation_kwargs=extra
        )
    else:
        raise ConfigError(f"vllm_mode must be server or colocate, got {vg.mode!r}")
    return EngineGenerator(complete, stop_token_ids=stop_token_ids)


def _rank_client(vg: Any) -> Any:
    """A generation-only ``VLLMClient`` for a process other than TRL's main one."""
    from trl.generation.vllm_client import VLLMClient

    base = vg.server_base_url or f"http://{vg.server_host}:{vg.server_port}"
    client = VLLMClient(base_url=base, connection_timeout=vg.server_timeout)
    vg.vllm_client = client  # one per process, reused by later steps
    return client
