"""What the job runtime and the ranks agree on, defined once: environment variables, file names and
words. train/ writes them and slurmgen/ reads them (slurmgen imports this; train never imports slurmgen)."""

STOP_FILE_ENV = "SLURMGEN_STOP_FILE"  # the file made at a time-limit warning: checkpoint and stop
OUTCOME_FILE_ENV = "SLURMGEN_OUTCOME_FILE"  # rank 0 writes "STOPPED STEP" or "FINISHED STEP" there
STOPPED, FINISHED = "stopped", "finished"
HEARTBEAT_DIR_ENV = "SLURMGEN_HEARTBEAT_DIR"  # where every rank beats
BEAT_FILE = "rank-{rank}"  # one per rank in the heartbeat folder: "RANK STEP TIME NODE PID [save SECONDS]"
STOPPABLE_FILE = "stoppable"  # in the heartbeat folder: the ranks' code takes the stop file (a Trainer)
DUMP_SIGNAL = "SIGUSR1"  # every rank writes its Python stacks on it (the hang watch's question)
STOP_WAIT_ENV = "SLURMGEN_STOP_WAIT"  # seconds ranks get to stop after the warning
COLLECTIVE_TIMEOUT_ENV = "SLURMGEN_COLLECTIVE_TIMEOUT"  # seconds a collective may hang
PRECISION_ENV = "SLURMGEN_PRECISION"  # bf16 or fp16, what every GPU of the job computes in
