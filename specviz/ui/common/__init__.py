"""What every page shares: session-state keys, memoised frames, this session's client, the error guard, the developer
messages dropped, navigation, type-checked widgets, the shared model caches, prompt and memory budgets, timing,
example prompts and model presets, and the owner's policy on the page (access) with its model turns (turns)."""
