"""The rank hooks on a real Lightning Trainer (lightning 2.x): imported in a job, the Trainer gets the
job's stop (a callback that saves Lightning's hpc checkpoint at the stop file and stops), whichever
name the package has. The whole job on the cluster: tests/e2e/test_lightning.py."""
import importlib

import pytest

from tests.conftest import need
from train import heartbeat, lightning_hooks

need("lightning")


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_a_trainer_imported_in_a_job_gets_the_stop_callback(package, tmp_path, monkeypatch):
    module = importlib.import_module(f"{package}.trainer.trainer")  # lightning requires pytorch-lightning
    monkeypatch.setattr(module.Trainer, "__init__", module.Trainer.__init__)  # undone after the test
    for name in ("fit", "validate", "test", "predict"):
        monkeypatch.setattr(module.Trainer, name, getattr(module.Trainer, name))
    lightning_hooks.after_trainer_import(module)  # raised ModuleNotFoundError: {package}.trainer.callbacks
    monkeypatch.setenv(heartbeat.HEARTBEAT_DIR_ENV, str(tmp_path))
    trainer = module.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False)
    assert [type(c).__name__ for c in trainer.callbacks if type(c).__name__ == "StopAtTheWarning"] == \
        ["StopAtTheWarning"]
