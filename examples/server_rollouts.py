"""Train on rollouts that went through the production path: the controller, run_agent,
an OpenAI client and an OpenAI-compatible server that returns token ids.

    python examples/server_rollouts.py MODEL_DIR ENV        (e.g. base user_env:Counter)

A LocalOpenAIServer on 127.0.0.1 serves the trainer's own policy object, so every RL
step samples from the weights the last step left. With vLLM, pass its base URL to
ServerRollouts instead and push the weights after each step (docs/training.md, Scale).
"""

from __future__ import annotations

import sys

from budgetmix.training import TrainConfig
from budgetmix.training.serving.openai_server import LocalOpenAIServer
from budgetmix.training.serving.server_rollout import ServerRollouts
from budgetmix.training.trainer import Trainer


def main(model_dir: str, env: str) -> None:
    config = TrainConfig(
        model_path=model_dir,
        env=env,
        sft_steps=0,
        steps=2,
        groups_per_step=1,
        group_size=2,
        max_new_tokens=32,
        output_dir="runs/server",
        progress=False,
    )
    trainer = Trainer(config)
    with LocalOpenAIServer(trainer.policy, trainer.tokenizer, model_name="policy") as server:
        rollouts = ServerRollouts(
            server.base_url, "policy", settings=trainer.settings, temperature=config.temperature
        )
        trainer.rl_rollouts = rollouts  # the RL steps roll out through the server
        result = trainer.run()
        rollouts.close()
    report = rollouts.report
    print(f"steps {result.steps_done} requests {report.requests} rows {report.rows}")
    print(f"split episodes {report.split_episodes} (one row per turn), served {len(server.log)}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
