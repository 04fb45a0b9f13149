"""The labs' sides, one module per page: exactness, numerics, benchmark, theory (with its batch measurement and the
session's measured points); the race page has three (race, probe, exercise). Each runs its measurement in the model's
queue and hands the page values to draw."""
