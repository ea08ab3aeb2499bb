"""What the job runtime and the ranks agree on, defined once: environment variables, file names and
words. train/ writes them and slurmgen/ reads them (slurmgen imports this; train never imports slurmgen)."""

STOP_FILE_ENV = "SLURMGEN_STOP_FILE"  # the file made at a time-limit warning: checkpoint and stop
OUTCOME_FILE_ENV = "SLURMGEN_OUTCOME_FILE"  # rank 0 writes "STOPPED STEP" or "FINISHED STEP" there
STOPPED, FINISHED = "stopped", "finished"
HEARTBEAT_DIR_ENV = "SLURMGEN_HEARTBEAT_DIR"  # where every rank beats
BEAT_FILE = "rank-{rank}"  # one per rank in the heartbeat folder: "RANK STEP TIME NODE PID [save S] [compute S]"
# At scale the ranks beat into a folder on their node instead ($TMPDIR or /tmp, this name-NODE), and
# one rank per node at a time publishes the node's lines as NODE_BEAT_FILE in the heartbeat folder,
# at most every PUBLISH_SECONDS (at once when a save begins or ends): the shared file system sees
# one write per node, not one per rank and step.
NODE_BEATS_ENV = "SLURMGEN_NODE_BEATS"
NODE_BEAT_FILE = "node-{node}"
PUBLISH_SECONDS = 2.0
# In the heartbeat folder: a rank whose user script reached its end (no unhandled exception, no non-zero
# SystemExit) writes it at Python's exit, before C++ finalization, which can still abort the process (gloo's
# threads: "terminate called without an active exception", SIGABRT) after the work is done.
ENDED_FILE = "ended-{rank}"
RANK_PROCESS_ENV = "SLURMGEN_RANK_PROCESS"  # the pid of the rank's own process: Pythons it starts do not mark
STOPPABLE_FILE = "stoppable"  # in the heartbeat folder: the ranks' code takes the stop file (a Trainer)
# Every rank writes its Python stacks on this signal (the hang watch's question): a real-time one, SIGRTMIN+5,
# which no framework claims, where USR1 is Lightning's requeue and many codebases' own (a handler set
# after ours would take the question, and answer it with a requeue).
DUMP_SIGNAL_RT = 5  # an offset from SIGRTMIN
DUMP_SIGNAL = f"RTMIN+{DUMP_SIGNAL_RT}"  # kill's spelling
STOP_WAIT_ENV = "SLURMGEN_STOP_WAIT"  # seconds ranks get to stop after the warning
COLLECTIVE_TIMEOUT_ENV = "SLURMGEN_COLLECTIVE_TIMEOUT"  # seconds a collective may hang
PRECISION_ENV = "SLURMGEN_PRECISION"  # bf16 or fp16, what every GPU of the job computes in
# Set for the ranks by the rendered script or the submit path, read here:
WORLD_SIZE_ENV = "SLURMGEN_WORLD_SIZE"  # the job's world size (srun launcher: SLURM_NTASKS is a component's)
RANK_OFFSET_ENV = "SLURMGEN_RANK_OFFSET"  # srun launcher: the component's first global rank
STRAGGLER_WINDOW_ENV = "SLURMGEN_STRAGGLER_WINDOW"  # the straggler watch is on: steps a compute time averages
RESUME_ENV = "SLURMGEN_RESUME"  # "auto": a user's Trainer resumes from the newest complete checkpoint
SAVE_TIMEOUT_ENV = "SLURMGEN_SAVE_TIMEOUT"  # --save-timeout: seconds a checkpoint save may take
PREPARED_DATA_ENV = "SLURMGEN_PREPARED_DATA"  # --prep: the tokenized data's folder (train.sft)
PREPARE_ONLY_ENV = "SLURMGEN_PREPARE_ONLY"  # --prep's CPU job: prepare the data and stop
