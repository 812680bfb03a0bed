"""Run fingerprints (training/data/provenance.py) and the pinned settings and keyed streams they
record (training/data/reproducibility.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from budgetmix.cli.demo_summary import DEMO_REFERENCE, REFRESH_COMMAND, fingerprint_line
from budgetmix.manifest import file_sha256, write_manifest
from budgetmix.training.data.provenance import (
    fingerprint_differences,
    read_fingerprint,
    record_run_fingerprint,
    run_fingerprint,
    write_reference_fingerprint,
)
from budgetmix.training.data.reproducibility import (
    PINNED_KERNELS,
    keyed_generator,
    keyed_random,
    pin_kernels,
    reproducible,
    stream_seed,
)

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
CONFIG = {"seed": 3, "steps": 2, "output_dir": "somewhere", "progress": True}


def _run_dir(root: Path, weights: bytes = b"w" * 64) -> Path:
    """A run folder: a model directory with a manifest and a loose tensor file."""
    final = root / "runs" / "arm-s0" / "final"
    final.mkdir(parents=True)
    (final / "model.safetensors").write_bytes(weights)
    (final / "config.json").write_text("{}")
    write_manifest(final)
    (root / "runs" / "arm-s0" / "reference.safetensors").write_bytes(b"r" * 32)
    return root


def test_the_fingerprint_lists_every_tensor_file_and_its_digest_ignores_where(
    tmp_path: Path,
) -> None:
    root = _run_dir(tmp_path / "a")
    fp = run_fingerprint(CONFIG, root, threads=1, data=[root / "runs" / "arm-s0" / "final"])
    assert fp["checkpoints"] == {
        "runs/arm-s0/final/model.safetensors": file_sha256(
            root / "runs/arm-s0/final/model.safetensors"
        ),
        "runs/arm-s0/reference.safetensors": file_sha256(
            root / "runs/arm-s0/reference.safetensors"
        ),
    }
    assert fp["packages"]["torch"] == torch.__version__
    assert fp["threads"]["intra_op"] == 1
    assert set(fp["threads"]["environment"]) >= {"OMP_NUM_THREADS", "inter_op"}
    assert fp["kernels"]["aten_cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    # the same run written elsewhere, watched or not, with other thread variables: same digest
    other = _run_dir(tmp_path / "b")
    moved = {**CONFIG, "output_dir": "elsewhere", "progress": False}
    again = run_fingerprint(moved, other, threads=1, data=[other / "runs" / "arm-s0" / "final"])
    again["threads"]["environment"]["OMP_NUM_THREADS"] = "7"
    assert fingerprint_differences(again, fp) == []


def test_differences_name_what_changed(tmp_path: Path) -> None:
    fp = run_fingerprint(CONFIG, _run_dir(tmp_path / "a"), threads=1)
    changed = run_fingerprint({**CONFIG, "seed": 4}, _run_dir(tmp_path / "b", b"v" * 64), threads=2)
    changed["packages"] = {**changed["packages"], "torch": "0.0"}
    found = fingerprint_differences(changed, fp)
    assert f"packages: torch 0.0 (reference {torch.__version__})" in found
    assert "config" in found
    assert "threads: 2 (reference 1)" in found
    assert "checkpoints: 1 of 2 files" in found
    assert "data" not in found and not any(d.startswith("kernels") for d in found)


def test_the_machine_is_recorded_named_when_bits_differ_and_left_out_of_the_digest(
    tmp_path: Path,
) -> None:
    fp = run_fingerprint(CONFIG, _run_dir(tmp_path / "a"), threads=1)
    machine = fp["machine"]
    assert machine["arch"] and isinstance(machine["isa"], list | type(None))
    elsewhere = {**fp, "machine": {**machine, "vendor": "AuthenticAMD", "isa": ["avx2"]}}
    assert fingerprint_differences(elsewhere, fp) == []  # same bits: the machine is no cause
    other = run_fingerprint(CONFIG, _run_dir(tmp_path / "b", b"v" * 64), threads=1)
    other["machine"] = elsewhere["machine"]
    found = fingerprint_differences(other, fp)
    assert any(d.startswith("machine: AuthenticAMD") and "AVX2" in d for d in found), found
    old = {k: v for k, v in fp.items() if k != "machine"}  # a reference from before it
    assert any("(reference not recorded)" in d for d in fingerprint_differences(other, old))


def test_summary_gets_the_fingerprint_and_the_demo_line_compares_it(tmp_path: Path) -> None:
    root = _run_dir(tmp_path / "exp")
    summary = root / "summary.json"
    summary.write_text(json.dumps({"config": CONFIG, "stats": {}}))
    reference = tmp_path / "demo_fingerprint.json"
    line = fingerprint_line(summary, {**CONFIG, "threads": 1}, reference)
    recorded = read_fingerprint(summary)  # recorded on the way: the run did not
    assert recorded is not None and json.loads(summary.read_text())["stats"] == {}
    assert line.endswith(f"no reference fingerprint recorded in {reference}")
    assert recorded["digest"][:16] in line
    write_reference_fingerprint(summary, reference)
    assert fingerprint_line(summary, {}, reference).endswith(
        f"matches {reference} (the README's figures)"
    )
    (root / "runs/arm-s0/reference.safetensors").write_bytes(b"x")
    record_run_fingerprint(summary, CONFIG, root, threads=1)
    assert "differs from" in fingerprint_line(summary, {}, reference)
    assert "checkpoints: 1 of 2 files" in fingerprint_line(summary, {}, reference)


def test_the_repository_reference_is_readable_and_says_how_to_refresh_it() -> None:
    data = json.loads((ROOT / DEMO_REFERENCE).read_text())
    assert data.get("digest") is None or read_fingerprint(ROOT / DEMO_REFERENCE) is not None
    if data.get("digest") is None:
        assert "write_reference_fingerprint" in data["note"]
    assert "write_reference_fingerprint" in REFRESH_COMMAND


def test_streams_are_keyed_not_ordered() -> None:
    assert stream_seed(0, "rl", 3) == stream_seed(0, "rl", 3)
    assert len({stream_seed(0, "rl", s) for s in range(50)} | {stream_seed(1, "rl", 0)}) == 51
    assert stream_seed(0, "rl", 3) < 2**63
    first = keyed_random(0, "sft", 1).random()
    keyed_random(0, "sft", 0).random()  # another stream drawn in between changes nothing
    assert keyed_random(0, "sft", 1).random() == first
    gen = torch.Generator()
    same = keyed_generator(0, "rl", 2, generator=gen)
    assert same is gen
    assert torch.equal(
        torch.rand(4, generator=gen), torch.rand(4, generator=keyed_generator(0, "rl", 2))
    )
    code = (
        "from budgetmix.training.data.reproducibility import stream_seed; "
        "print(stream_seed(0, 'rl', 3))"
    )
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(other.stdout) == stream_seed(0, "rl", 3)  # not Python's per-process hash


def test_reproducible_pins_for_the_block_and_restores() -> None:
    before = torch.get_num_threads()
    outside = torch.rand(1)
    state = torch.get_rng_state()
    with reproducible(1, seed=9):
        assert torch.get_num_threads() == 1
        assert torch.are_deterministic_algorithms_enabled()
        inside = torch.rand(3)
    with reproducible(1, seed=9):
        assert torch.equal(torch.rand(3), inside)  # the global generator seeded from the seed
    assert torch.equal(torch.get_rng_state(), state)  # and the caller's put back
    assert torch.get_num_threads() == before
    assert not torch.are_deterministic_algorithms_enabled()
    assert outside.shape == (1,)


def test_pin_kernels_keeps_a_value_already_set() -> None:
    env = {"MKL_CBWR": "AUTO"}
    assert PINNED_KERNELS["MKL_CBWR"] != "AUTO"
    assert pin_kernels(env) == {**PINNED_KERNELS, "MKL_CBWR": "AUTO"}
    assert env == {**PINNED_KERNELS, "MKL_CBWR": "AUTO"}
    assert os.environ["ATEN_CPU_CAPABILITY"]  # the test session pins them (conftest)


def test_the_demo_summary_prints_the_fingerprint_after_the_experiment(tmp_path: Path) -> None:
    from budgetmix.cli.demo_summary import DemoResults, summary_lines

    root = _run_dir(tmp_path / "experiment")
    summary = root / "summary.json"
    summary.write_text(json.dumps({"config": CONFIG}))
    report = {
        "comparison": [],
        "config": {**CONFIG, "threads": 1},
        "files": {"summary": str(summary)},
    }
    lines = summary_lines(tmp_path, DemoResults(train={"report": report}, traces="spans"))
    shown = [line for line in lines if "fingerprint" in line]
    recorded = read_fingerprint(summary)
    assert recorded is not None and len(shown) == 1
    assert shown[0].startswith(f"   fingerprint {recorded['digest'][:16]} ({summary}): ")
    assert str(DEMO_REFERENCE) in shown[0]


def test_the_kernel_probe_is_recorded_outside_the_digest_and_names_the_kernels_that_differ(
    tmp_path: Path,
) -> None:
    from budgetmix.training.data.kernel_probe import PROBE_GEMMS

    fp = run_fingerprint(CONFIG, _run_dir(tmp_path / "a"), threads=1)
    probe = fp["kernel_probe"]
    assert {f"gemm {op} {m}x{n}x{k}" for op, m, n, k in PROBE_GEMMS} <= set(probe)
    assert {"softmax", "layer_norm", "sdpa_causal", "python math"} <= set(probe)
    assert run_fingerprint(CONFIG, _run_dir(tmp_path / "b"), threads=2)["kernel_probe"] == probe
    elsewhere = {**fp, "kernel_probe": {**probe, "softmax": "0" * 16}}
    assert fingerprint_differences(elsewhere, fp) == []  # same bits: the probe is no cause
    other = run_fingerprint(CONFIG, _run_dir(tmp_path / "c", b"v" * 64), threads=1)
    other["kernel_probe"] = elsewhere["kernel_probe"]
    found = fingerprint_differences(other, fp)
    assert f"kernel_probe: 1 of {len(probe)} kernels differ (softmax)" in found, found
    assert not any(d.startswith("kernel_probe") for d in fingerprint_differences(
        {**other, "kernel_probe": probe}, fp))  # fmt: skip
    old = {k: v for k, v in fp.items() if k != "kernel_probe"}  # a reference from before it
    assert not any(d.startswith("kernel_probe") for d in fingerprint_differences(other, old))
