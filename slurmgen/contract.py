"""What the job runtime and the ranks agree on (environment variables, file names, words), read from
train/contract.py beside this package by its path: defined once, and never through `import train`,
which a user's own train.py in the working directory would shadow."""

import importlib.util
import os

# os.path, not pathlib: render imports this module, and nothing else on its way needs pathlib (issue 43)
_FILE = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "train", "contract.py")
_spec = importlib.util.spec_from_file_location("slurmgen._train_contract", _FILE)
_module = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_module)

STOP_FILE_ENV: str = _module.STOP_FILE_ENV
OUTCOME_FILE_ENV: str = _module.OUTCOME_FILE_ENV
STOPPED: str = _module.STOPPED
FINISHED: str = _module.FINISHED
HEARTBEAT_DIR_ENV: str = _module.HEARTBEAT_DIR_ENV
BEAT_FILE: str = _module.BEAT_FILE
NODE_BEATS_ENV: str = _module.NODE_BEATS_ENV
NODE_BEAT_FILE: str = _module.NODE_BEAT_FILE
PUBLISH_SECONDS: float = _module.PUBLISH_SECONDS
STOPPABLE_FILE: str = _module.STOPPABLE_FILE
ENDED_FILE: str = _module.ENDED_FILE
RANK_PROCESS_ENV: str = _module.RANK_PROCESS_ENV
DUMP_SIGNAL: str = _module.DUMP_SIGNAL
DUMP_SIGNAL_RT: int = _module.DUMP_SIGNAL_RT
STOP_WAIT_ENV: str = _module.STOP_WAIT_ENV
COLLECTIVE_TIMEOUT_ENV: str = _module.COLLECTIVE_TIMEOUT_ENV
PRECISION_ENV: str = _module.PRECISION_ENV
WORLD_SIZE_ENV: str = _module.WORLD_SIZE_ENV
RANK_OFFSET_ENV: str = _module.RANK_OFFSET_ENV
STRAGGLER_WINDOW_ENV: str = _module.STRAGGLER_WINDOW_ENV
RESUME_ENV: str = _module.RESUME_ENV
SAVE_TIMEOUT_ENV: str = _module.SAVE_TIMEOUT_ENV
PREPARED_DATA_ENV: str = _module.PREPARED_DATA_ENV
PREPARE_ONLY_ENV: str = _module.PREPARE_ONLY_ENV
