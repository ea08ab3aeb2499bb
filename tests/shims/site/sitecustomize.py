"""Loaded by the Python stand-in (tests/shims/python): each task of the srun stand-in reports the
node it plays (SHIM_HOST) as its host name, as a task on a real node would."""
import os
import socket

if os.environ.get("SHIM_HOST"):
    socket.gethostname = lambda: os.environ["SHIM_HOST"]
