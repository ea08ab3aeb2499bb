"""Inside a running job, on its batch node: preflight verdict, retries and exclusion, the hang watch."""
