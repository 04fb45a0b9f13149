"""The owner's rules for a shared server: who may do what, and how much. Plain Python (no streamlit), validated here.

Two roles. The machine's owner at its keyboard keeps every option (*local mode*). Everyone else is a participant and
gets *shared mode*: the risky options (trust remote code, pickle checkpoints, downloads), free-text model paths and the
device/dtype choices are hidden unless the owner allowed them, models come from the owner's allow-list, and the work
one click can ask for is capped. Which one a browser session gets (decide_mode):

* shared when SPECVIZ_MODE=shared;
* shared when the client cannot be the owner: its connection does not come from this machine's loopback, it
  carries a proxy header, or its Host or Origin names another site than localhost (a page at a DNS-rebinding name:
  specviz.workshop.clients), whatever the bind address or SPECVIZ_MODE says;
* otherwise local when the server listens on a local address (localhost, 127.0.0.1, ::1, or none given) or
  SPECVIZ_MODE=local; shared when it listens on any other address (0.0.0.0: the owner runs it for a room).

The owner sets the rules with environment variables (they win) or a ``[specviz]`` table in ``.streamlit/secrets.toml``:

=========================  ======================  ==========================================================
environment variable       secrets.toml key        meaning (shared-mode default)
=========================  ======================  ==========================================================
SPECVIZ_MODE               mode                    ``shared`` or ``local`` (auto; never local for a client
                                                   that cannot be the owner: see decide_mode)
SPECVIZ_ALLOW_REMOTE_CODE  allow_remote_code       participants may tick *trust remote code* (no)
SPECVIZ_ALLOW_PICKLE       allow_pickle            participants may tick *allow pickle checkpoints* (no)
SPECVIZ_ALLOW_DOWNLOAD     allow_download          participants may tick *allow downloads* (no)
SPECVIZ_ALLOW_CUSTOM_MODELS allow_custom_models    participants may type any model path or hub id (no)
SPECVIZ_ALLOW_DEVICE       allow_device            participants may choose device and dtype (no)
SPECVIZ_TARGETS            targets                 comma-separated target allow-list (the embedded model)
SPECVIZ_DRAFTS             drafts                  comma-separated draft-model allow-list (none)
SPECVIZ_MEDUSA_HEADS       allowed_medusa_heads    comma-separated Medusa heads and EAGLE head folders (none: the shipped ones only)
SPECVIZ_MAX_NEW_TOKENS     max_new_tokens          cap on max new tokens per run (256)
SPECVIZ_MAX_DRAFT_TOKENS   max_draft_tokens        cap on k, tokens drafted per round (8)
SPECVIZ_MAX_PROMPT_CHARS   max_prompt_chars        cap on the Numerics lab's prompt, in characters (2,000)
SPECVIZ_MAX_PROMPT_TOKENS  max_prompt_tokens       cap on every prompt, in the target's tokens, chat template included (1,024)
SPECVIZ_MAX_KV_TOKENS      max_kv_tokens           live KV-cache tokens in this process, every session's runs and jobs
                                                   together (0: a quarter of the machine's memory, specviz.workshop.budgets)
SPECVIZ_MAX_SESSIONS_PER_CLIENT max_sessions_per_client  browser sessions one client address may hold (100; 0: no cap)
SPECVIZ_MAX_SAMPLES        max_samples             cap on vectorised samples N on the Exactness lab (100,000)
SPECVIZ_MAX_RUNS           max_runs                cap on engine runs one button starts (lab, benchmark) (50)
SPECVIZ_MAX_CONCURRENT     max_concurrent          model rounds in flight per loaded model (1 per CPU model)
SPECVIZ_QUEUE_TIMEOUT_S    queue_timeout_s         give up waiting for the model after this long (120)
SPECVIZ_IDLE_MINUTES       idle_minutes            free a session's runs after this long without a click (20)
SPECVIZ_PRESENTATION_IDLE_MINUTES presentation_idle_minutes  end the room's presentation after this long without
                                                   its presenter's page (15)
SPECVIZ_MAX_SAVED_RUNS     max_saved_runs          saved runs one browser session keeps in the run directory; a
                                                   new one replaces its own oldest (5; 100 in local mode)
SPECVIZ_PROBE_URLS         probe_urls              comma-separated services participants may probe (none); the
                                                   rule: specviz.workshop.probe_urls
SPECVIZ_PRESENTER_KEY      presenter_key           the key that presents a run to the room (none: presenting is
                                                   off); read by specviz.workshop.presenter_key, never kept here
=========================  ======================  ==========================================================

The limits and the queue apply in both modes; in local mode their defaults are the engine's own limits (no cap on
sessions per client; the KV-cache budget is sized from the machine in both modes).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass

from specviz.config import EMBEDDED_TARGET, FIELDS, MAX_PROMPT_CHARS, MAX_PROMPT_TOKENS, RunConfig
from specviz.workshop.probe_urls import parse_list

CAPPED = tuple(s for s in FIELDS if s.cap)  # RunConfig fields an owner's limit caps (the table: specviz.config.FIELDS)
# each such limit -> the range of the field it caps (a limit can be no looser than the engine's own range); local mode's value is the top
LIMIT_RANGES: tuple[tuple[str, int, int], ...] = tuple({s.cap: (s.cap, int(s.low or 0), int(s.high or 0)) for s in CAPPED}.values())
LOCAL_ADDRESSES = ("", "localhost", "127.0.0.1", "::1", "[::1]")
MODES = ("shared", "local")
MAX_SAMPLES = 1_000_000  # the Exactness lab's largest sample size
MAX_RUNS = 1_000
MAX_KV_TOKENS = 100_000_000  # live KV-cache tokens a process may be told to hold (a 135M model: 4.6 TB; a sanity bound)
MAX_SESSIONS = 100_000

# name in the [specviz] secrets table -> (environment variable, kind)
SETTINGS: dict[str, tuple[str, str]] = {
    "mode": ("SPECVIZ_MODE", "mode"),
    "allow_remote_code": ("SPECVIZ_ALLOW_REMOTE_CODE", "bool"),
    "allow_pickle": ("SPECVIZ_ALLOW_PICKLE", "bool"),
    "allow_download": ("SPECVIZ_ALLOW_DOWNLOAD", "bool"),
    "allow_custom_models": ("SPECVIZ_ALLOW_CUSTOM_MODELS", "bool"),
    "allow_device": ("SPECVIZ_ALLOW_DEVICE", "bool"),
    "targets": ("SPECVIZ_TARGETS", "list"),
    "drafts": ("SPECVIZ_DRAFTS", "list"),
    "allowed_medusa_heads": ("SPECVIZ_MEDUSA_HEADS", "list"),
    "max_new_tokens": ("SPECVIZ_MAX_NEW_TOKENS", "int"),
    "max_draft_tokens": ("SPECVIZ_MAX_DRAFT_TOKENS", "int"),
    "max_prompt_chars": ("SPECVIZ_MAX_PROMPT_CHARS", "int"),
    "max_prompt_tokens": ("SPECVIZ_MAX_PROMPT_TOKENS", "int"),
    "max_kv_tokens": ("SPECVIZ_MAX_KV_TOKENS", "int"),
    "max_sessions_per_client": ("SPECVIZ_MAX_SESSIONS_PER_CLIENT", "int"),
    "max_samples": ("SPECVIZ_MAX_SAMPLES", "int"),
    "max_runs": ("SPECVIZ_MAX_RUNS", "int"),
    "max_concurrent": ("SPECVIZ_MAX_CONCURRENT", "int"),
    "queue_timeout_s": ("SPECVIZ_QUEUE_TIMEOUT_S", "float"),
    "idle_minutes": ("SPECVIZ_IDLE_MINUTES", "float"),
    "presentation_idle_minutes": ("SPECVIZ_PRESENTATION_IDLE_MINUTES", "float"),
    "max_saved_runs": ("SPECVIZ_MAX_SAVED_RUNS", "int"),
    "probe_urls": ("SPECVIZ_PROBE_URLS", "list"),
}
PRESENTER_KEY_SECRET = "presenter_key"  # a secret, not a rule: not a Policy field (a Policy is shown and logged)
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


@dataclass(frozen=True)
class Policy:
    """What participants may do. The defaults are shared mode's: nothing risky, the embedded model only."""

    shared: bool = True
    allow_remote_code: bool = False
    allow_pickle: bool = False
    allow_download: bool = False
    allow_custom_models: bool = False  # free-text target / draft paths and hub ids
    allow_device: bool = False  # the device and dtype menus
    targets: tuple[str, ...] = (EMBEDDED_TARGET,)
    drafts: tuple[str, ...] = ()
    allowed_medusa_heads: tuple[str, ...] = ()  # heads folders besides the shipped ones (RunConfig.medusa_heads None)
    max_new_tokens: int = 256
    max_draft_tokens: int = 8
    max_prompt_chars: int = 2_000  # the Numerics lab's prompt: its prefill passes (one model turn each) grow with it
    max_prompt_tokens: int = 1_024  # every prompt, counted with the target's tokenizer (a character can be 4 tokens)
    max_kv_tokens: int = 0  # live KV-cache tokens in this process; 0: a quarter of the machine's memory (budgets.py)
    max_sessions_per_client: int = 100  # a room behind one NAT shares an address: a cap against floods, not a quota
    max_samples: int = 100_000
    max_runs: int = 50
    max_concurrent: int = 0  # 0: sized from the device (1 per model on a CPU, 2 on a GPU)
    queue_timeout_s: float = 120.0
    idle_minutes: float = 20.0
    presentation_idle_minutes: float = 15.0  # a presentation whose presenter's page is gone ends by itself
    max_saved_runs: int = 5  # per browser session (specviz.ui.room.saved_runs): its own oldest goes, never another's
    probe_urls: tuple[str, ...] = ()  # services participants may probe (the race page); the owner probes anything

    def __post_init__(self) -> None:
        parse_list(self.probe_urls)  # a malformed entry is a bad setting (ValueError naming it)
        if not self.targets:
            raise ValueError("The target allow-list (SPECVIZ_TARGETS / targets) is empty: name at least one model.")
        checks = (
            *LIMIT_RANGES, ("max_prompt_chars", 1, MAX_PROMPT_CHARS),
            ("max_prompt_tokens", 1, MAX_PROMPT_TOKENS), ("max_kv_tokens", 0, MAX_KV_TOKENS), ("max_sessions_per_client", 0, MAX_SESSIONS),
            ("max_samples", 1, MAX_SAMPLES), ("max_runs", 1, MAX_RUNS), ("max_concurrent", 0, 256), ("queue_timeout_s", 1, 86_400), ("idle_minutes", 1, 7 * 24 * 60),
            ("presentation_idle_minutes", 1, 7 * 24 * 60),
            ("max_saved_runs", 1, 1_000),
        )  # fmt: skip
        for name, low, high in checks:
            value = getattr(self, name)
            if not (low <= value <= high):
                env = SETTINGS[name][0]
                raise ValueError(f"{env} (or {name} in secrets.toml) must be between {low} and {high}; got {value}.")

    @classmethod
    def local(cls, **overrides) -> Policy:
        """The laptop: every option, the engine's own limits."""
        base = dict(
            shared=False, allow_remote_code=True, allow_pickle=True, allow_download=True, allow_custom_models=True, allow_device=True,
            **{name: high for name, _, high in LIMIT_RANGES}, max_prompt_chars=MAX_PROMPT_CHARS,
            max_prompt_tokens=MAX_PROMPT_TOKENS, max_sessions_per_client=0, max_samples=MAX_SAMPLES, max_runs=200, max_saved_runs=100,
        )  # fmt: skip
        return cls(**(base | overrides))

    # --- what a participant may choose -------------------------------------------------------------------------

    def allows_target(self, source: str) -> bool:
        return self.allow_custom_models or source.strip() in self.targets

    def allows_draft(self, source: str) -> bool:
        return self.allow_custom_models or source.strip() in self.drafts or source.strip() in self.targets

    def allows_heads(self, folder: str | None) -> bool:
        """None is the shipped heads, always allowed; a folder only when the owner listed it (or allows custom models)."""
        return folder is None or self.allow_custom_models or folder.strip() in self.allowed_medusa_heads

    def allows_model(self, source: str) -> bool:
        return self.allows_target(source) or self.allows_draft(source)

    @property
    def default_target(self) -> str:
        return self.targets[0]

    def enforce(self, config: RunConfig) -> tuple[RunConfig, list[str], list[str]]:
        """A config within the rules, plus (refusals, limits): messages for what was refused or capped.

        Refused options fall back to the safe default (embedded model, no opt-ins, auto device); over-limit numbers
        are capped at the limit. Never raises for a valid RunConfig."""
        refusals: list[str] = []
        limits: list[str] = []
        changes: dict = {}
        for field, label in (("trust_remote_code", "trust remote code"), ("allow_pickle", "allow pickle checkpoints"), ("allow_download", "allow downloads")):
            allowed = {"trust_remote_code": self.allow_remote_code, "allow_pickle": self.allow_pickle, "allow_download": self.allow_download}[field]
            if getattr(config, field) and not allowed:
                refusals.append(f"'{label}' is not allowed on this shared server; it stays off.")
                changes[field] = False
        if not self.allows_target(config.target):
            refusals.append(f"The target {config.target!r} is not on this server's list; using {self.default_target!r}.")
            changes["target"] = self.default_target
        if config.draft and not self.allows_draft(config.draft):
            refusals.append(f"The draft model {config.draft!r} is not on this server's list.")
            changes["draft"] = None
            if config.needs_draft_model:
                changes["drafter"] = RunConfig().drafter
        if not self.allows_heads(config.medusa_heads):
            refusals.append(f"The Medusa heads folder {config.medusa_heads!r} is not on this server's list; using the shipped heads.")
            changes["medusa_heads"] = None
        if not self.allows_heads(config.eagle_head):  # the same list: heads folders the owner allows
            refusals.append(f"The EAGLE head folder {config.eagle_head!r} is not on this server's list; using the shipped head.")
            changes["eagle_head"] = None
        if not self.allow_device and (config.device, config.dtype) != ("auto", "auto"):
            refusals.append(f"Choosing the device and dtype ({config.device}, {config.dtype}) is not allowed on this shared server; using auto.")
            changes.update(device="auto", dtype="auto")
        for s in CAPPED:  # the fields the table says a limit caps (k, adaptive k's ceiling, max new tokens)
            limit, value = getattr(self, s.cap), getattr(config, s.name)
            if value > limit:
                if s.cap_message:
                    limits.append(s.cap_message.format(limit=limit, value=value))
                changes[s.name] = limit
        return (dataclasses.replace(config, **changes) if changes else config), refusals, limits

    def cap(self, value: int, limit_name: str, what: str) -> tuple[int, str | None]:
        """value capped at the named limit, and a message when it was over."""
        limit = getattr(self, limit_name)
        if value > limit:
            return limit, f"{what} is limited to {limit:,} on this server (asked for {value:,})."
        return value, None

    def concurrency(self, device_type: str) -> int:
        """Model rounds in flight at once for one loaded model."""
        if self.max_concurrent:
            return self.max_concurrent
        return 2 if device_type == "cuda" else 1


# --- reading the owner's settings ------------------------------------------------------------------------------


def _parse(name: str, kind: str, raw: object):
    env = SETTINGS[name][0]
    where = f"{env} (or {name} in secrets.toml)"
    if kind == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in TRUE:
            return True
        if text in FALSE:
            return False
        raise ValueError(f"{where} must be true or false (1/0, yes/no, on/off); got {raw!r}.")
    if kind == "list":
        items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
        return tuple(dict.fromkeys(str(i).strip() for i in items if str(i).strip()))
    if kind == "mode":
        text = str(raw).strip().lower()
        if text not in MODES + ("", "auto"):
            raise ValueError(f"{where} must be 'shared' or 'local'; got {raw!r}.")
        return text if text in MODES else None
    try:
        return int(raw) if kind == "int" else float(raw)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be a number; got {raw!r}.") from None


def is_local_address(address: str | None) -> bool:
    """The server listens on this machine's loopback only, or on Streamlit's default (no address given)."""
    return (address or "").strip().lower() in LOCAL_ADDRESSES


def bind_text(address: str | None) -> str:
    """The bind address as a log line says it."""
    text = (address or "").strip()
    return text if text else "every interface (no address set)"


def decide_mode(setting: str | None, server_address: str | None, owner_possible: bool) -> tuple[str, str]:
    """("local" | "shared", why) for one browser session (module docstring).

    setting: the owner's SPECVIZ_MODE / mode (None: auto); owner_possible: the session's client is this machine's
    loopback with no proxy header, naming loopback in its Host and Origin (specviz.workshop.clients.Client.owner_possible). why completes "Local mode: ..." /
    "Shared mode: ..." (the client's own reason is said apart)."""
    if setting == "shared":
        return "shared", "the owner set SPECVIZ_MODE=shared"
    if not owner_possible:
        return "shared", "only a browser on this machine's loopback, at localhost or 127.0.0.1, with no proxy in between, can be its owner"
    if setting == "local":
        return "local", "you are this machine's owner, and SPECVIZ_MODE=local"
    if is_local_address(server_address):
        return "local", "you are this machine's owner"
    return "shared", f"this server listens on {bind_text(server_address)}, for a room"


def mode_rule(setting: str | None, server_address: str | None) -> str:
    """The mode rule of this server in one line (logged once at start)."""
    if setting == "shared":
        return "SPECVIZ_MODE=shared: every session is in shared mode"
    owner = "a session from this machine's loopback with no proxy header, a loopback Host and Origin is the owner (local mode)"
    if setting == "local":
        return f"SPECVIZ_MODE=local: {owner}; every other session is in shared mode"
    if is_local_address(server_address):
        return f"{owner}; every other session is in shared mode"
    return "every session is in shared mode, the owner's on loopback too (SPECVIZ_MODE=local: local mode for the owner's)"


def read_settings(env: Mapping[str, str] | None = None, secrets: Mapping | None = None) -> dict:
    """The owner's settings by name, parsed: environment variables first, then the [specviz] secrets table.
    Raises ValueError naming the bad setting."""
    env = os.environ if env is None else env
    secrets = secrets or {}
    unknown = sorted(set(secrets) - set(SETTINGS) - {PRESENTER_KEY_SECRET})
    if unknown:
        raise ValueError(f"Unknown setting(s) in the [specviz] table of secrets.toml: {', '.join(unknown)}. Known: {', '.join(SETTINGS)}.")
    values = {}
    for name, (var, kind) in SETTINGS.items():
        raw = env.get(var)
        if raw is None or (isinstance(raw, str) and not raw.strip() and kind != "bool"):
            raw = secrets.get(name)
        if raw is not None:
            values[name] = _parse(name, kind, raw)
    return values


def load_policy(
    env: Mapping[str, str] | None = None, secrets: Mapping | None = None, server_address: str | None = "localhost", owner_possible: bool = True
) -> Policy:
    """The policy from environment variables (first), then the [specviz] secrets table, then the mode's defaults.

    server_address: where the streamlit server listens; owner_possible: whether the session's client may be this
    machine's owner (the mode: decide_mode). Raises ValueError naming the bad setting."""
    values = read_settings(env, secrets)
    mode, _ = decide_mode(values.pop("mode", None), server_address, owner_possible)
    return Policy.local(**values) if mode == "local" else Policy(**values)
