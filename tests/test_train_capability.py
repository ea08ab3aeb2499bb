"""Machine-dependent training defaults, checked against a stand-in for torch.cuda (no GPU here).

Unit level: what train.hf asks torch and what it then sets on TRL's parser."""
import pytest
import torch

from train import devices, hf
from train.distenv import DistEnv


class FakeCuda:
    """A GPU machine as torch.cuda reports it: ``hardware_bf16`` for the real answer; with
    emulation counted, every GPU says yes (what V100s and T4s report by default)."""

    def __init__(self, hardware_bf16: bool):
        self.hardware_bf16 = hardware_bf16
        self.calls = []

    def install(self, monkeypatch):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "set_device", lambda d: self.calls.append(("set_device", d)))
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", self.is_bf16_supported)

    def is_bf16_supported(self, including_emulation=True):
        self.calls.append(("is_bf16_supported", including_emulation))
        return self.hardware_bf16 or including_emulation


@pytest.mark.parametrize("hardware, bf16, fp16", [(True, True, False), (False, False, True)])
def test_bf16_is_the_hardware_answer_on_the_ranks_own_gpu(monkeypatch, hardware, bf16, fp16):
    cuda = FakeCuda(hardware)
    cuda.install(monkeypatch)
    denv = DistEnv(rank=3, local_rank=1, world_size=6, local_world_size=2, launcher="torchrun")
    defaults = hf.capability_defaults(denv)
    assert (defaults["bf16"], defaults["fp16"]) == (bf16, fp16)
    # The rank's own device first, so asking creates no context on GPU 0; then no emulation.
    assert cuda.calls == [("set_device", denv.device_index), ("is_bf16_supported", False)]


def test_gradient_checkpointing_keeps_trls_default_on_gpus(monkeypatch):
    FakeCuda(True).install(monkeypatch)
    assert "gradient_checkpointing" not in hf.capability_defaults(DistEnv())


def test_gradient_checkpointing_off_on_cpus():
    assert not torch.cuda.is_available()
    defaults = hf.capability_defaults(DistEnv())
    assert "gradient_checkpointing" in defaults and not defaults["gradient_checkpointing"]
    assert devices.bf16_supported(DistEnv()) is False and defaults["use_cpu"] is True


def test_a_bf16_gpu_trains_in_fp16_when_another_gpu_of_the_job_lacks_bf16(monkeypatch):
    """One precision for the whole job: the batch script's preflight says fp16 (a V100 among
    A100s), so a rank on an A100 takes fp16 too; an explicit --bf16 is refused in one line."""
    FakeCuda(True).install(monkeypatch)
    monkeypatch.setenv(hf.PRECISION_ENV, "fp16")
    defaults = hf.capability_defaults(DistEnv())
    assert (defaults["bf16"], defaults["fp16"]) == (False, True)
    from types import SimpleNamespace

    from train.cli import UsageError
    with pytest.raises(UsageError, match=r"^--bf16: some of the job's GPUs have no bf16 \(the preflight line in"
                                         r" the job log names them\); drop it: every rank trains in fp16$"):
        hf.one_precision(SimpleNamespace(bf16=True))
    hf.one_precision(SimpleNamespace(bf16=False))
    monkeypatch.setenv(hf.PRECISION_ENV, "bf16")
    assert hf.capability_defaults(DistEnv())["bf16"] is True
    hf.one_precision(SimpleNamespace(bf16=True))


def _report(host, *models):
    return {"host": host, "gpu_models": [list(m) for m in models]}


V100, A100 = ("Tesla V100-SXM2-32GB", "32768", "7.0"), ("NVIDIA A100-SXM4-80GB", "81920", "8.0")


def test_preflight_chooses_the_precision_every_gpu_supports(tmp_path):
    from slurmgen.job.preflight import precision

    assert precision([_report("node1", A100), _report("node2", A100, A100)]) == ("bf16", "")
    assert precision([_report("node1", V100), _report("node2", V100)]) == ("fp16", "")
    assert precision([_report("node1"), _report("node2")]) == ("", "")  # no nvidia-smi: each rank decides
    assert precision([_report("node3", A100), _report("node1", V100), _report("node2", A100, A100)]) == (
        "fp16", "slurmgen: the job's GPUs differ in bf16 support (node1: Tesla V100-SXM2-32GB (no bf16);"
                " node2: NVIDIA A100-SXM4-80GB (bf16); node3: NVIDIA A100-SXM4-80GB (bf16)): every rank trains in fp16")
