"""Rollouts: how a policy's turns become token ids, exactly as deployment renders them.

The KV-cache sampler and its attention masks, the chat codec (a checkpoint's chat
template, canonical reply ids, drift checks), token generators (model and scripted),
the multi-turn rollout loop with the SDK's ledger and notice, and the tiny models'
tokenizer. May import the core, ``adapters``, ``policies`` and ``training.envs``
(and ``training.toy``); nothing else of ``training``.
"""
