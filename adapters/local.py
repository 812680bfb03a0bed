"""A local transformers causal LM as a :class:`~budgetmix.adapters.base.ChatModel`.

The conversation is rendered by :class:`~budgetmix.adapters.chat_template.ChatTemplate`,
the one renderer training uses too (docs/layout.md): assistant tool calls as
structured ``tool_calls``, tool results as ``tool`` messages, the tool specs as
the template's ``tools=``; replies are parsed back with the template's tool-call
format (Hermes ``<tool_call>{json}</tool_call>`` blocks or the Llama-3.x JSON
form). Generation stops on every stop id (``generation_config``'s EOS ids, the
tokenizer's EOS, the template's end-of-turn token). A notice passed with the
request (placement ``"ephemeral"``) is a final user message of that one request;
with placement ``"observation"`` the loop has already put it into the history.
The model generates greedily (``temperature=0``) or by seeded sampling.

torch and transformers are imported on first use; without them
:class:`~budgetmix.exceptions.MissingExtraError` names the ``train`` extra.
:func:`load_model` is the one Hugging Face loader (training's ``load_pretrained``
calls it); :func:`loading_errors` turns a loader failure on a local directory
into a :class:`~budgetmix.exceptions.CheckpointError`.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

from budgetmix._deps import require
from budgetmix.adapters.base import (
    ChatModelBase,
    Messages,
    ModelRequest,
    ModelResponse,
    Notice,
    Tools,
    Usage,
)
from budgetmix.adapters.chat_template import (
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    ChatTemplate,
    ToolCallFormat,
    ToolsIn,
    parse_tool_calls,
)
from budgetmix.exceptions import CheckpointError, ConfigError
from budgetmix.policy import NoticePolicy

__all__ = [
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "LocalChatModel",
    "load_model",
    "loading_errors",
    "parse_tool_calls",
]

#: A Hugging Face Hub model id: ``name`` or ``owner/name`` (nothing path-like).
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")


def _local_model_dir(path: str | Path, *, local_files_only: bool) -> bool:
    """``True`` for a local directory (its manifest verified); ``False`` for a Hub id.

    Raises:
        ConfigError: ``path`` is no directory and may not, or cannot, name a Hub model.
        CheckpointError: a file the directory's manifest lists is damaged.
    """
    if Path(path).is_dir():
        from budgetmix.manifest import verify_manifest

        verify_manifest(path)
        return True
    text = str(path)
    if local_files_only:
        raise ConfigError(
            f"path {text!r} is not a local model directory (local_files_only: no download)"
        )
    if Path(path).exists() or not _HUB_ID.fullmatch(text) or ".." in text or "--" in text:
        raise ConfigError(f"path {text!r} is neither a local model directory nor a Hub model id")
    return False


@contextmanager
def loading_errors(path: str | Path) -> Iterator[None]:
    """Turn what transformers raises on a broken local model into a CheckpointError.

    Raises:
        CheckpointError: naming ``path`` and carrying the loader's message.
    """
    from safetensors import SafetensorError

    try:
        yield
    except (SafetensorError, OSError, ValueError, RuntimeError, KeyError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise CheckpointError(
            f"could not load the model in {str(path)!r}: {exc}", Path(path)
        ) from exc


@contextmanager
def _loading_errors(local: str | Path | None) -> Iterator[None]:
    """Loader failures on a local directory as a CheckpointError naming it."""
    if local is None:
        yield
        return
    with loading_errors(local):
        yield


def load_model(
    path: str | Path, *, dtype: str = "float32", local_files_only: bool = False
) -> tuple[Any, Any]:
    """``(model, tokenizer)`` with ``AutoModelForCausalLM`` / ``AutoTokenizer``: the one loader.

    Weights are read from safetensors only (``use_safetensors=True``). ``path``
    is a local directory or a Hub id (``local_files_only=True`` forbids downloads);
    a local directory is never looked up on the Hub, and one that budgetmix
    wrote is verified against its ``manifest.json`` first. ``dtype`` reaches
    transformers under the keyword this version takes.

    Raises:
        MissingExtraError: torch/transformers are not installed.
        ConfigError: unknown ``dtype``, or ``path`` is no local directory (and,
            with ``local_files_only``, or not shaped like a Hub id, names no model).
        CheckpointError: a file of the directory is damaged (the message names it)
            or the model in it cannot be loaded.
    """
    torch = require("torch", "train")
    transformers = require("transformers", "train")
    torch_dtype = {
        "float32": torch.float32,
        "bfloat16": torch.bfloat16,
        "float16": torch.float16,
    }.get(dtype)
    if torch_dtype is None:
        raise ConfigError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    local = _local_model_dir(path, local_files_only=local_files_only)
    # transformers 4.56 renamed torch_dtype to dtype; pass whichever this version takes.
    major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
    with _loading_errors(path if local else None):
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            str(path), local_files_only=local_files_only or local
        )
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(path),
            use_safetensors=True,
            local_files_only=local_files_only or local,
            **{dtype_kw: torch_dtype},
        )
    return model, tokenizer


class _Generated(NamedTuple):
    call: int  # the call's number (its seed offset and tool-call id prefix)
    prompt_tokens: int
    new_ids: list[int]


class LocalChatModel(ChatModelBase[str, _Generated]):
    """A local causal LM and its tokenizer, as a chat model.

    Args:
        model: a transformers causal LM (``generate`` is used).
        tokenizer: its tokenizer, with a chat template.
        model_name: reported as the model name (default: the config's name or ``"local"``).
        max_new_tokens: generation cap per turn (hitting it gives ``finish_reason="length"``).
        temperature: 0 for greedy decoding, > 0 to sample.
        top_p: nucleus sampling cutoff when sampling.
        seed: sampling seed; call ``n`` samples with ``seed + n``, so a run is reproducible.
        tools_in: where tool specs go: the template's ``tools`` variable, a
            system message, or ``"auto"`` (the template if it mentions ``tools``).
        chat_template: a template text instead of the tokenizer's (the one the model was
            trained with, when that was a training variant).
        tool_call_format: the parser of its tool calls (default: the one the template
            implies; ``ChatTemplate``).

    ``trained_notice`` (``None`` here) is the notice policy the model was trained with;
    :func:`budgetmix.training.serving.serve.chat_model` sets it from the checkpoint, and
    ``run_agent`` then refuses a controller whose notice placement or format differs.
    ``trained_grace_turn`` (``None`` here; ``False`` for a checkpoint trained without a
    grace turn) makes ``run_agent`` refuse a controller that grants one.

    Raises:
        ConfigError: the tokenizer has no chat template, or an argument is out of range.
    """

    provider_name: str = "transformers"
    trained_notice: NoticePolicy | None = None
    trained_grace_turn: bool | None = None

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_name: str | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int = 0,
        tools_in: ToolsIn = "auto",
        chat_template: str | None = None,
        tool_call_format: ToolCallFormat | None = None,
    ) -> None:
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {max_new_tokens!r}")
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature!r}")
        if not 0.0 < top_p <= 1.0:
            raise ConfigError(f"top_p must lie in (0, 1], got {top_p!r}")
        self.template = ChatTemplate.for_model(
            model,
            tokenizer,
            chat_template=chat_template,
            tools_in=tools_in,
            tool_call_format=tool_call_format,
        )
        self.model = model
        self.tokenizer = tokenizer
        config_name = getattr(getattr(model, "config", None), "_name_or_path", "") or "local"
        self.model_name = model_name or str(config_name)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.calls = 0
        self._lock = threading.Lock()

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        *,
        dtype: str = "float32",
        device: str | None = None,
        local_files_only: bool = False,
        **options: Any,
    ) -> LocalChatModel:
        """Load model and tokenizer with :func:`load_model` (safetensors only, manifest checked).

        ``path`` is a local directory or a Hub id (``local_files_only=True``
        forbids downloads). ``options`` go to the constructor.

        Raises:
            MissingExtraError, ConfigError, CheckpointError: as :func:`load_model`;
                ``ConfigError`` also for an option out of range.
        """
        model, tokenizer = load_model(path, dtype=dtype, local_files_only=local_files_only)
        if device is not None:
            model = model.to(device)
        model.eval()
        options.setdefault("model_name", Path(str(path)).name or str(path))
        return cls(model, tokenizer, **options)

    # -- rendering -----------------------------------------------------------------------
    def render(self, messages: Messages, tools: Tools, notice: Notice) -> str:
        """The prompt text of one request (ends with the assistant generation prompt); a
        ``notice`` is a final user message of this request only."""
        rows = self.template.rows(messages)
        if notice:
            rows.append({"role": "user", "content": notice})
        return self.template.render(rows, tools, add_generation_prompt=True)

    # -- generation ----------------------------------------------------------------------
    def build_request(self, call: ModelRequest) -> str:
        """The prompt of ``call``. ``tool_choice="none"`` keeps the tools in the prompt; a
        local model cannot be forced, so any tool calls it writes are still reported."""
        return self.render(call.messages, call.tools, call.notice)

    def encode_prompt(self, request: str) -> list[int]:
        """The ids the model is fed for the prompt ``request`` (no special tokens added)."""
        return self.template.encode(request)

    def send(self, request: str) -> _Generated:
        """Generate a reply to the prompt ``request`` (seeded by the call's number)."""
        torch = require("torch", "train")
        ids = torch.tensor([self.encode_prompt(request)], dtype=torch.long)
        encoded = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        device = next(self.model.parameters()).device
        input_ids = encoded["input_ids"].to(device)
        attention = encoded["attention_mask"].to(device)
        with self._lock:
            call = self.calls
            self.calls += 1
            with torch.random.fork_rng(devices=[] if device.type == "cpu" else [device]):
                torch.manual_seed(self.seed + call)
                with torch.no_grad():
                    output = self.model.generate(
                        input_ids=input_ids,
                        attention_mask=attention,
                        generation_config=self._generation_config(),
                    )
        prompt_tokens = int(input_ids.shape[1])
        return _Generated(call, prompt_tokens, output[0, prompt_tokens:].tolist())

    def read_reply(self, reply: _Generated, request: str) -> ModelResponse:
        """The generated tokens as text and tool calls (the template's format); no stop
        token means the cap cut it (``finish_reason="length"``)."""
        new_ids = reply.new_ids
        stops = self.template.stop_token_ids
        stopped = any(t in stops for t in new_ids)
        if stopped:  # generate() pads after the stop; what follows it is not the reply
            new_ids = new_ids[: next(i for i, t in enumerate(new_ids) if t in stops) + 1]
        text = self.tokenizer.decode(new_ids, skip_special_tokens=True)
        content, calls = self.template.parse(text, id_prefix=f"call_{reply.call}")
        finish = "length" if not stopped else ("tool_calls" if calls else "stop")
        return ModelResponse(
            text=content,
            tool_calls=calls,
            finish_reason=finish,
            usage=Usage(input_tokens=reply.prompt_tokens, output_tokens=len(new_ids)),
            model=self.model_name,
            raw=self.tokenizer.decode(new_ids, skip_special_tokens=False),
        )

    def _generation_config(self) -> Any:
        transformers = require("transformers", "train")
        sample = self.temperature > 0
        pad = self.tokenizer.pad_token_id
        stops = list(self.template.stop_token_ids)
        options: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "do_sample": sample,
            "eos_token_id": stops,
            "pad_token_id": pad if pad is not None else stops[0],
        }
        if sample:
            options.update(temperature=self.temperature, top_p=self.top_p, top_k=0)
        return transformers.GenerationConfig(**options)
