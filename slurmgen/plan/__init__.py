"""The job as asked for and as planned, on the login node: spec, layout, sweeps, profiles (pure)."""
