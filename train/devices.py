"""What this rank can compute on: CUDA, hardware bf16, bitsandbytes, and its own device.

Asked before the trainers' arguments are parsed (their defaults depend on the answers) and
by train.ddp_loop to place its model. torch is imported inside each function, so importing
this module stays cheap.
"""

from __future__ import annotations

from train.distenv import DistEnv


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def bf16_supported(denv: DistEnv | None = None) -> bool:
    """bf16 in hardware on this rank's own GPU (Ampere and newer).

    torch's default answer counts emulation, so V100/T4 would say yes and train slowly. The
    rank's device is selected first, so asking creates no CUDA context on GPU 0 for every rank.
    """
    import torch

    if not torch.cuda.is_available():
        return False
    if denv is not None:
        torch.cuda.set_device(denv.device_index)
    return torch.cuda.is_bf16_supported(including_emulation=False)


def bitsandbytes_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("bitsandbytes") is not None


def device_for(denv: DistEnv):
    import torch

    if torch.cuda.is_available():
        return torch.device("cuda", denv.device_index)
    return torch.device("cpu")
