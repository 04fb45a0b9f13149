"""What measures: the timing harness (measure), the benchmark sweep (bench), the cost profile (cost_profile), the
exactness lab's samplers (lab) and the numerics comparison (numerics). Each runs real models through specviz.runs."""
