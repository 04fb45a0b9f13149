"""What measures: the timing harness (measure), timed decoder runs (timed_runs), the benchmark prompt set (prompts), the
benchmark sweep (bench), the cost profile (cost_profile, timing profile_runners), the exactness lab's samplers (lab)
and the numerics comparison (numerics). Each runs real models through specviz.runs."""
