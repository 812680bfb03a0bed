"""The CPU-checkable parts of bench/gpu/ (flags, model and tokenizer, the in-process path, results).

The vLLM, TRL and vllm-serve paths need a CUDA device and vLLM: ``bash bench/gpu/run.sh``
on a GPU machine runs them (bench/gpu/README.md); here they are skipped with that reason.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

GPU = Path(__file__).resolve().parents[2] / "bench" / "gpu"
sys.path.insert(0, str(GPU))  # bench.py imports gpu_model and gpu_phases from its folder
_spec = importlib.util.spec_from_file_location("gpu_bench", GPU / "bench.py")
assert _spec is not None and _spec.loader is not None
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``bench.py --prepare-only --sft-steps 0``, as a user runs it (a subprocess)."""
    out = tmp_path_factory.mktemp("bench")
    cmd = [sys.executable, str(GPU / "bench.py"), "--out", str(out), "--prepare-only"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([*cmd, "--sft-steps", "0"], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = Path(json.loads(proc.stdout.strip().splitlines()[-1])["model_dir"])
    assert path == out / "model"
    return path


@pytest.mark.slow
def test_the_model_is_a_qwen2_that_transformers_loads(model_dir: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    assert config.model_type == "qwen2" and config.architectures == ["Qwen2ForCausalLM"]
    assert config.hidden_size // config.num_attention_heads == 64  # a head size vLLM kernels take
    assert config.vocab_size == len(tok) and tok.chat_template
    generation = json.loads((model_dir / "generation_config.json").read_text())
    assert generation["eos_token_id"] == tok.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])


@pytest.mark.slow
def test_the_in_process_path_runs_on_cpu(model_dir: Path) -> None:
    import gpu_phases

    args = argparse.Namespace(
        model_dir=model_dir, groups=2, group_size=2, max_new_tokens=4, ceiling=4, device="cpu"
    )
    row = gpu_phases.run_phase("inprocess", args)
    assert row["episodes"] == 4 and row["sampled_tokens"] > 0
    assert row["rollout_tokens_per_s"] == pytest.approx(row["sampled_tokens"] / row["seconds"])


def test_results_are_written_as_json_and_a_table(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [
        {"path": "inprocess", "ok": True, "rollout_tokens_per_s": 100.0, "sampled_tokens": 50},
        {"path": "vllm", "ok": True, "rollout_tokens_per_s": 450.0, "sampled_tokens": 52},
        {"path": "trl_native", "ok": False, "note": "timed out after 200 s"},
        {  # on other episodes: its ratio is to its own in-process reference
            "path": "vllm_server",
            "ok": True,
            "rollout_tokens_per_s": 300.0,
            "reference_tokens_per_s": 150.0,
            "sampled_tokens": 40,
        },
    ]
    meta = {"gpu": "X", "date": "d", "settings": {"groups": 16}, "versions": {"vllm": "0.31.0"}}
    bench.write_results(tmp_path, rows, meta)
    assert json.loads((tmp_path / "results.json").read_text()) == {"meta": meta, "rows": rows}
    table = (tmp_path / "results.md").read_text()
    assert "| budgetmix + vLLM (vllm.LLM) | 450 | 4.5 | - | 52 |" in table
    assert "timed out after 200 s" in table and "groups=16" in table
    assert "| budgetmix ServerRollouts + vllm serve (tool env) | 300 | 2.0 | - | 40 |" in table


def test_flags_are_checked() -> None:
    with pytest.raises(SystemExit):
        bench.build_parser().parse_args(["--out", "x", "--groups", "0"])
    args = bench.build_parser().parse_args(["--out", "x"])
    assert (args.groups, args.group_size, args.sft_steps, args.trl_steps) == (16, 8, 60, 4)


@pytest.mark.slow
def test_without_vllm_the_bench_says_how_to_run_it(
    model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vLLM is installed here: the GPU paths run instead")
    status = bench.main(["--out", str(model_dir.parent), "--sft-steps", "0"])
    assert status == 2 and "bash bench/gpu/run.sh" in capsys.readouterr().out


@pytest.mark.skipif(
    importlib.util.find_spec("vllm") is None,
    reason="the vLLM, TRL and vllm-serve paths need CUDA and vLLM: bash bench/gpu/run.sh on a GPU",
)
def test_gpu_paths(tmp_path: Path) -> None:  # pragma: no cover - GPU machines only
    status = bench.main(["--out", str(tmp_path), "--groups", "2", "--group-size", "2"])
    assert status == 0, (tmp_path / "results.md").read_text()


# -- the server paths (bench/gpu/gpu_server.py): what a CPU can check ------------------------
HEALTHY = """
import http.server, subprocess, sys
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("serving, worker", worker.pid, flush=True)  # a member of its group, as vLLM's engine
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == sys.argv[2] else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_a_served_command_is_waited_for_and_its_process_group_stopped(tmp_path: Path) -> None:
    import gpu_server

    port = gpu_server.free_port()
    command = [sys.executable, "-c", HEALTHY, str(port), "/health"]
    log = tmp_path / "serve.log"
    with gpu_server.served(command, f"http://127.0.0.1:{port}/health", log) as proc:
        assert proc.poll() is None  # answered its health route, still running
    assert proc.poll() is not None
    _assert_gone(int(log.read_text().split("worker")[1].split()[0]))  # its group stopped
    crash = [sys.executable, "-c", "print('no model here'); raise SystemExit(3)"]
    with (
        pytest.raises(RuntimeError, match=r"exited with 3: .*no model here"),
        gpu_server.served(crash, f"http://127.0.0.1:{port}/health", log),
    ):
        pass
    other = gpu_server.free_port()
    never = [sys.executable, "-c", HEALTHY, str(other), "/elsewhere"]
    health = f"http://127.0.0.1:{other}/health"
    with (
        pytest.raises(RuntimeError, match="not healthy after 2 s"),
        gpu_server.served(never, health, log, timeout_s=2),
    ):
        pass


def _assert_gone(pid: int) -> None:
    """``pid`` ends within 10 s (a zombie waiting for init to reap it counts as ended)."""
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
        except FileNotFoundError:
            return
        if state == "Z":
            return
        time.sleep(0.1)
    raise AssertionError(f"process {pid} is still running")


PHASE = """
import sys, time
sys.path.insert(0, sys.argv[1])
import gpu_server
gpu_server.stop_on_sigterm()
command = [sys.executable, "-c", sys.argv[2], sys.argv[3], "/health"]
health, log = f"http://127.0.0.1:{sys.argv[3]}/health", gpu_server.Path(sys.argv[4])
with gpu_server.served(command, health, log):
    print("up", flush=True)
    time.sleep(600)
"""


def test_a_phase_stopped_at_its_timeout_stops_the_server_it_started(tmp_path: Path) -> None:
    """bench.py SIGTERMs a phase past its timeout: the phase unwinds and stops its server's
    whole group (else vLLM would keep the GPU and the port for the paths after it)."""
    import gpu_server

    port, log = gpu_server.free_port(), tmp_path / "serve.log"
    phase = subprocess.Popen(
        [sys.executable, "-c", PHASE, str(GPU), HEALTHY, str(port), str(log)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert phase.stdout is not None and phase.stdout.readline().strip() == "up"
    worker = int(log.read_text().split("worker")[1].split()[0])
    group = os.getpgid(worker)  # the server's group
    try:
        phase.terminate()
        assert phase.wait(timeout=60) == 143
        _assert_gone(worker)
    finally:  # a failed check leaves nothing running
        phase.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)


def test_vllm_serve_is_started_as_the_training_docs_say() -> None:
    import gpu_server

    command = gpu_server.vllm_serve_command(Path("m"), 8123, 0.3)
    assert command[1:3] == ["serve", "m"] and Path(command[0]).name == "vllm"
    docs = (GPU.parents[1] / "docs" / "training.md").read_text()
    for flag in ("--enable-auto-tool-choice", "--tool-call-parser hermes",
                 "--logprobs-mode processed_logprobs", "--served-model-name policy"):  # fmt: skip
        assert flag in docs and flag in " ".join(command)
    trl = gpu_server.trl_serve_command(Path("m"), 8124, 0.3)
    assert trl[1:4] == ["vllm-serve", "--model", "m"] and "8124" in trl


@pytest.mark.slow
def test_the_server_path_rolls_out_through_an_openai_compatible_server(model_dir: Path) -> None:
    """The vllm_server phase's rollouts, against the loopback server that speaks vLLM's
    fields (vllm serve needs a GPU)."""
    import gpu_server
    from budgetmix.training.serving.openai_server import LocalOpenAIServer
    from transformers import AutoModelForCausalLM, AutoTokenizer

    args = argparse.Namespace(groups=2, group_size=2, max_new_tokens=4, ceiling=4)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    with LocalOpenAIServer(model, tok, model_name="policy") as server:
        row = gpu_server.server_rollouts_rate(server.base_url, "policy", args)
    assert row["episodes"] == 4 and row["sampled_tokens"] > 0 and row["mean_turns"] >= 1
    assert row["rollout_tokens_per_s"] > 0 and row["seconds"] > 0
    # the row's reference: the same episodes rolled out in-process
    local = argparse.Namespace(**vars(args), model_dir=model_dir, device="cpu")
    assert gpu_server.inprocess_rate(local) > 0


@pytest.mark.slow
def test_trl_server_mode_on_fewer_than_two_gpus_says_why_it_did_not_run(
    model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the phase process sees no GPU, anywhere
    args = bench.build_parser().parse_args(["--out", str(tmp_path), "--device", "cpu"])
    row = bench._run_phase(args, "trl_server", model_dir)
    assert row["ok"] and row["note"].startswith("not run: TRL's server mode runs")
    assert "separate CUDA devices" in row["note"] and "rollout_tokens_per_s" not in row
