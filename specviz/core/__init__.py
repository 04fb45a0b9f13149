"""The algorithm in plain torch: sampling warps, the verify rule, the decoding loop and its records.

Notation follows Leviathan, Kalman & Matias (2023): ``p_target`` is the target model's
distribution, ``q_draft`` the draft's, ``x`` a drafted token. Nothing here imports
streamlit or transformers, nor anything else in specviz.

The modules, bottom up (no cycles):
  limits      k <= 16 and the seed's ranges, written once (MAX_DRAFT_TOKENS, SEED_MAX, SEED_UI_MAX)
  sampling    logits -> probabilities under temperature, top-k and top-p (SamplingConfig, warp, draw)
  verify      the accept/resample rule, decided on the device (decide, residual, Decision)
  tree        token trees: the tree's mask and its exact rule (TreeDraft, decide_tree)
  protocols   what the round needs from a model and a drafter (CachedLM, Drafter, TreeDrafter, ...), a model turn
              (Turn) and the pause points a long prefill yields at
  rounds      the round's two shapes behind one interface: the chain (ChainRound) and its phases
  tree_round  the tree-shaped round (TreeRound)
  theory      the expected speedup after Leviathan et al., section 3 (expected_tokens, speedup, best_k)
  auto_k      k: auto, the k each round picks from past rounds (AutoK, choose_k)
  profile     one machine's cost profile as a record (CostProfile, load_profile)
  records     the frozen per-round records (StepRecord, TokenDist) and their one builder (build_record)
  metrics     every acceptance and speed metric by the name each tool gives it, from a run's records (Totals, RunMetrics)
  resume      where a run stands between two rounds (RunState), for a restore or a saved run
  decoding    the decoding loop: prefill once, then a round a step() (DecodeConfig, SpeculativeDecoder, resume)
  divergence  where a greedy run left its baseline, and how close the call was there (first_divergence)
  batch       B streams at once: plain and speculative decoding batched, ragged acceptance (BatchDecoder)
  bursts      bursts in a token stream, read from arrival times alone (analyze, judge)
  race        the race's record: one prompt decoded plainly and speculatively, each round's commit time (RaceResult)
  toy         a vectorised toy of one speculative position, for checking exactness by counting (run_toy)
Import each name from the module that defines it; this package re-exports nothing.
"""
