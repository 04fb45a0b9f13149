"""A run's hard limits, each written once and imported wherever a range is checked or offered.

MAX_DRAFT_TOKENS  k <= 16: the tokens a round may draft (a tree: its nodes), for every drafter and k policy; the
                  engine, the config's range, the owner's cap, the sidebar, the CLI, the API, a recording's check and
                  the theory page's k axis all read it. A round commits at most MAX_DRAFT_TOKENS + 1 tokens.
SEED_MAX          a seed is a whole number in 0..SEED_MAX (what a torch.Generator takes as a signed 64-bit integer): the
                  API's seed, a saved race's, a recording's
SEED_UI_MAX       the seed a page's number input offers, 0..SEED_UI_MAX (a number a browser's input holds exactly, and
                  short enough to type)
"""

MAX_DRAFT_TOKENS = 16
SEED_MAX = 2**63 - 1
SEED_UI_MAX = 2**31 - 1
