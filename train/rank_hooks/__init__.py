"""The folder slurmgen puts first on the ranks' PYTHONPATH when a job runs the user's own code: it
holds only sitecustomize.py, which Python runs at start-up (see there)."""

import os

DIR = os.path.dirname(os.path.abspath(__file__))
