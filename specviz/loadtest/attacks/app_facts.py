"""What the attacks know of the app, in one place: its pages (URL paths), widget keys, labels and the few message
patterns they read. Nothing depends on the app's exact messages where an outcome can be read instead (a rounds metric,
the run directory, the presentation file)."""

import re

STEP_PAGE, LAB_PAGE, BENCH_PAGE, RACE_PAGE = "", "exactness", "benchmark", "race"  # URL paths (specviz/ui/common/navigation.py)
KEY_STEP, KEY_RESET, KEY_RUN_ALL = "step", "reset", "run_all"  # specviz/ui/step_through/controls.py
KEY_PROMPT, KEY_COMPARE, KEY_MAX_NEW, KEY_ADAPTIVE_K = "prompt", "compare", "max_new_tokens", "adaptive_k"  # specviz/ui/step_through/sidebar.py
KEY_FOLLOW, KEY_FORK = "follow", "fork"  # specviz/ui/room/follow.py, specviz/ui/room/fork.py
KEY_PRESENT_KEY, KEY_PRESENT, KEY_STOP_PRESENT = "present_key", "present", "stop_present"
KEY_LAB_MODE, KEY_LAB_PROMPT, KEY_LAB_RUN, KEY_TOY_TABLE = "lab_real_mode", "lab_real_prompt", "lab_real_run", "lab_vocab"  # pages/exactness.py
KEY_RACE_START, KEY_GUESS, KEY_GUESS_SUBMIT = "race_start", "race_guess", "race_guess_submit"  # specviz/ui/labs/race.py, exercise.py
KEY_BENCH_RUN, KEY_BENCH_PER_CATEGORY, KEY_BENCH_REPEATS, KEY_BENCH_NEW = "bench_run", "bench_per_category", "bench_repeats", "bench_max_new_tokens"  # pages/benchmark.py
OWNER_WIDGETS = ("trust_remote_code", "allow_download", "allow_pickle")  # the sidebar's Models expander, owner only
ROUNDS_METRIC = "rounds"  # the step-through page's metric
TOY_METRIC = "TV from p_target"  # the toy table's first metric: the section drew
OPTION_EARLY_EXIT = "early"  # a word of the early-exit drafter's label in the Compare menu
OPTION_FAST = "fast"  # a word of the lab's fast method's label
KEY_CHECKED = ("not the presenter key",)  # a refused key that was compared
KEY_LIMITED = ("too many", "wait ", "try again", "locked", "slow down")  # a key refused without being compared
TRACEBACK = re.compile(r"Traceback|File \"|site-packages|(?:/[\w.-]+){2,}\.py")  # what shows server internals
