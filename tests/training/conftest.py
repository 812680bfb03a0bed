"""Shared fixtures for training tests: a char tokenizer and a seeded tiny model (CPU)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from budgetmix.training.data.reproducibility import pin_kernels

# The kernels a training run pins (ATen at AVX2, MKL's reproducible branch), set before any
# test runs torch: in one pytest process the first kernel fixes them for every later test.
pin_kernels()

# Without the train extra the training tests are not collected (envs/ tests still are).
_HAVE_TRAIN = all(importlib.util.find_spec(m) for m in ("torch", "transformers", "accelerate"))
collect_ignore_glob = [] if _HAVE_TRAIN else ["test_*.py"]


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    pytest.importorskip("transformers")
    from budgetmix.training.rollouts.tokenizer import build_char_tokenizer

    return build_char_tokenizer()


@pytest.fixture()
def tiny_model(tokenizer: Any) -> Any:
    from budgetmix.training.data.models import TinyModelSpec, build_tiny_model

    return build_tiny_model(TinyModelSpec(), tokenizer, seed=0)


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> Any:
    """Tiny models gain nothing from threads, and OpenMP spin-waits thrash a busy CI box."""
    if not _HAVE_TRAIN:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
