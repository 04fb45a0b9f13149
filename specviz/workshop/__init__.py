"""What a shared server needs beyond one process: replicas behind a balancer (room/) and runs that survive (saved_runs)."""
