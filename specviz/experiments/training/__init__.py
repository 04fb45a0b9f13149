"""Training the drafters' heads for a target by self-distillation (`python -m specviz train-heads`).

What lives where:
- config.py    the run's settings: TrainConfig (Medusa heads, and the own-text data recipe) and EagleConfig, cache keys
- own_text.py  the target's own continuations of the training prompts (assets/training_prompts.json), cached; the
               cache's packed format and part files
- teacher.py   teacher-forced offline text (the standard library, /usr/share/doc), EAGLE's second source
- loop.py      what every run shares: the schedule, seeded batches, the frozen LM head's matmul, checkpoints, the loop
- medusa.py    Medusa heads: labels, loss, held-out top-1/top-5, train_heads, ship
- eagle.py     the EAGLE head: sequences and segments, EAGLE's loss, held-out first-draft-token top-1, train_eagle
               (a fresh head, or a trained one continued along its curve: read_start), ship_eagle
- gate.py      the EAGLE head's go/no-go (held-out first-draft top-1 >= 0.55, a draft step <= 0.06 of a target pass)
- save.py      what a run writes: atomic saves, the training curve, token counts for a draft vocabulary
"""
