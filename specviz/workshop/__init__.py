"""What a shared server needs beyond one process: replicas behind a balancer (room/), the room's store they share
(store/: the run directory or Redis; liveness), and runs that survive (saved_runs)."""
