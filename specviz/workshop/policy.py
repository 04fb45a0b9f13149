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

The owner sets the rules with environment variables (they win) or a ``[specviz]`` table in ``.streamlit/secrets.toml``.
Each rule is one Policy field declared with its row (``owner(...)``): shared mode's default, local mode's where it
differs, the environment variable, the range it must lie in and what it means. OWNER_SETTINGS is that table (with
SPECVIZ_MODE's row first), read by read_settings, Policy's checks and Policy.local; docs/workshop.md shows it
(tests/test_policy.py checks the two agree, defaults included). The presenter key is a secret, not a rule:
PRESENTER_KEY's row names it, specviz.workshop.presenter_key reads it, a Policy never holds it.

The limits and the queue apply in both modes; in local mode their defaults are the engine's own limits (no cap on
sessions per client; the KV-cache budget is sized from the machine in both modes).
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

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
A_WEEK_MIN = 7 * 24 * 60
TRUE, FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")
Kind = Literal["mode", "bool", "list", "int", "float", "secret"]
TOP = "top"  # local=TOP: local mode's value is the top of the range (the engine's own limit)


@dataclass(frozen=True)
class OwnerSetting:
    """One of the owner's settings: where it is read, what it defaults to, the range it must lie in, what it means.
    name, default and kind are read off the Policy field; the rest is written in its owner(...)."""

    name: str  # the Policy field, and its key in the [specviz] secrets table
    env: str  # its environment variable (which wins over the secrets table)
    help: str  # what it means
    default: Any = None  # shared mode's value
    local: Any = None  # local mode's value where it differs (TOP: the top of the range); None: the same
    low: float | None = None  # the range a value must lie in (None: any); a limit on a RunConfig field: that field's range
    high: float | None = None
    kind: Kind = "int"  # how a value is parsed (from the field's type)

    @property
    def where(self) -> str:
        """How an error message names it."""
        return f"{self.env} (or {self.name} in secrets.toml)"

    @property
    def default_words(self) -> str:
        """Shared mode's default as docs/workshop.md's table starts its cell."""
        return _words(self.default, self.kind)

    @property
    def local_words(self) -> str | None:
        """Local mode's value in the same words, where it differs from shared mode's."""
        if self.local is None:
            return None
        return _words(self.high if self.local == TOP else self.local, self.kind)


def _words(value: Any, kind: Kind) -> str:
    if kind == "mode":
        return "from the client and the address"
    if value is None or value == ():
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value == (EMBEDDED_TARGET,):
        return "the embedded model"
    if isinstance(value, tuple):
        return ", ".join(value)
    return f"{value:,g}" if isinstance(value, float) else f"{value:,}"


def owner(default: Any, env: str, help: str, *, local: Any = None, low: float | None = None, high: float | None = None) -> Any:
    """A Policy field with its OwnerSetting row (name, default and kind are filled in by OWNER_SETTINGS)."""
    row = OwnerSetting("", env, help, local=local, low=low, high=high)
    return dataclasses.field(default=default, metadata={"owner": row})


def _limit(cap: str) -> dict:
    """low and high of a limit on RunConfig fields: the capped field's range."""
    _, low, high = next(r for r in LIMIT_RANGES if r[0] == cap)
    return {"low": low, "high": high}


@dataclass(frozen=True)
class Policy:
    """What participants may do. The defaults are shared mode's: nothing risky, the embedded model only. Every field
    but `shared` is an owner setting, declared with its row (owner(...)); `shared` comes from the mode (decide_mode)."""

    shared: bool = True
    allow_remote_code: bool = owner(False, "SPECVIZ_ALLOW_REMOTE_CODE", "participants may tick *trust remote code*", local=True)
    allow_pickle: bool = owner(False, "SPECVIZ_ALLOW_PICKLE", "participants may tick *allow pickle checkpoints*", local=True)
    allow_download: bool = owner(False, "SPECVIZ_ALLOW_DOWNLOAD", "participants may tick *allow downloads*", local=True)
    allow_custom_models: bool = owner(False, "SPECVIZ_ALLOW_CUSTOM_MODELS", "participants may type any model path or hub id", local=True)
    allow_device: bool = owner(False, "SPECVIZ_ALLOW_DEVICE", "participants may choose device and dtype", local=True)
    targets: tuple[str, ...] = owner((EMBEDDED_TARGET,), "SPECVIZ_TARGETS", "target allow-list, comma-separated")
    drafts: tuple[str, ...] = owner((), "SPECVIZ_DRAFTS", "draft-model allow-list, comma-separated")
    allowed_medusa_heads: tuple[str, ...] = owner(  # heads folders besides the shipped ones (RunConfig.medusa_heads None)
        (), "SPECVIZ_MEDUSA_HEADS", "Medusa heads and EAGLE head folders participants may run besides the shipped ones",
    )
    max_new_tokens: int = owner(256, "SPECVIZ_MAX_NEW_TOKENS", "cap on max new tokens per run", local=TOP, **_limit("max_new_tokens"))
    max_draft_tokens: int = owner(8, "SPECVIZ_MAX_DRAFT_TOKENS", "cap on k, tokens drafted per round", local=TOP, **_limit("max_draft_tokens"))
    max_prompt_chars: int = owner(  # the Numerics lab's prompt: its prefill passes (one model turn each) grow with it
        2_000, "SPECVIZ_MAX_PROMPT_CHARS", "cap on the Numerics lab's prompt, in characters", local=TOP, low=1, high=MAX_PROMPT_CHARS,
    )
    max_prompt_tokens: int = owner(  # every prompt, counted with the target's tokenizer (a character can be 4 tokens)
        1_024, "SPECVIZ_MAX_PROMPT_TOKENS", "cap on every prompt, in the target's tokens, chat template included", local=TOP, low=1, high=MAX_PROMPT_TOKENS,
    )
    max_kv_tokens: int = owner(  # 0: a quarter of the machine's memory (budgets.py), in both modes
        0, "SPECVIZ_MAX_KV_TOKENS", "live KV-cache tokens in this process, every session's runs and jobs together", low=0, high=MAX_KV_TOKENS,
    )
    max_sessions_per_client: int = owner(  # a room behind one NAT shares an address: a cap against floods, not a quota
        100, "SPECVIZ_MAX_SESSIONS_PER_CLIENT", "browser sessions one client address may hold (0: no cap)", local=0, low=0, high=MAX_SESSIONS,
    )
    max_samples: int = owner(100_000, "SPECVIZ_MAX_SAMPLES", "cap on vectorised samples N on the Exactness lab", local=TOP, low=1, high=MAX_SAMPLES)
    max_runs: int = owner(50, "SPECVIZ_MAX_RUNS", "cap on engine runs one button starts (lab, benchmark)", local=200, low=1, high=MAX_RUNS)
    max_concurrent: int = owner(  # 0: sized from the device (1 per model on a CPU, 2 on a GPU)
        0, "SPECVIZ_MAX_CONCURRENT", "model rounds in flight per loaded model", low=0, high=256,
    )
    queue_timeout_s: float = owner(120.0, "SPECVIZ_QUEUE_TIMEOUT_S", "give up waiting for the model after this long", low=1, high=86_400)
    idle_minutes: float = owner(20.0, "SPECVIZ_IDLE_MINUTES", "free a session's runs after this long without a click", low=1, high=A_WEEK_MIN)
    presentation_idle_minutes: float = owner(  # a presentation whose presenter's page is gone ends by itself
        15.0, "SPECVIZ_PRESENTATION_IDLE_MINUTES", "end the room's presentation after this long without its presenter's page", low=1, high=A_WEEK_MIN,
    )
    max_saved_runs: int = owner(  # per browser session (specviz.ui.room.saved_runs): its own oldest goes, never another's
        5, "SPECVIZ_MAX_SAVED_RUNS", "saved runs one browser session keeps in the run directory", local=100, low=1, high=1_000,
    )
    probe_urls: tuple[str, ...] = owner(  # the owner probes anything; the rule: specviz.workshop.probe_urls
        (), "SPECVIZ_PROBE_URLS", "services participants may probe on the race page, comma-separated",
    )

    def __post_init__(self) -> None:
        parse_list(self.probe_urls)  # a malformed entry is a bad setting (ValueError naming it)
        if not self.targets:
            raise ValueError("The target allow-list (SPECVIZ_TARGETS / targets) is empty: name at least one model.")
        for name, (low, high) in limit_ranges().items():
            value = getattr(self, name)
            if not (low <= value <= high):
                raise ValueError(f"{SETTINGS[name].where} must be between {_num(low)} and {_num(high)}; got {value}.")

    @classmethod
    def local(cls, **overrides) -> Policy:
        """The laptop: every option, the engine's own limits."""
        ranges = limit_ranges()
        base = {r.name: ranges[r.name][1] if r.local == TOP else r.local for r in OWNER_SETTINGS if r.local is not None}
        return cls(**(base | {"shared": False} | overrides))

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


MODE = OwnerSetting("mode", "SPECVIZ_MODE", "shared or local (auto; never local for a client that cannot be the owner: decide_mode)", kind="mode")
PRESENTER_KEY = OwnerSetting(  # a secret, not a rule: not a Policy field (a Policy is shown and logged)
    "presenter_key", "SPECVIZ_PRESENTER_KEY", "the key that presents a run to the room (none: presenting is off)", kind="secret",
)
PRESENTER_KEY_SECRET = PRESENTER_KEY.name


def _kind(hint: Any) -> Kind:
    return "list" if typing.get_origin(hint) is tuple else typing.cast(Kind, hint.__name__)


def _rows() -> tuple[OwnerSetting, ...]:
    hints = typing.get_type_hints(Policy)
    rows = [MODE]
    for f in dataclasses.fields(Policy):
        row = f.metadata.get("owner")
        if row is None:
            if f.name != "shared":
                raise TypeError(f"Policy.{f.name} has no owner(...): declare its environment variable, range and help there.")
            continue
        rows.append(dataclasses.replace(row, name=f.name, default=f.default, kind=_kind(hints[f.name])))
    return tuple(rows)


OWNER_SETTINGS: tuple[OwnerSetting, ...] = _rows()  # SPECVIZ_MODE's row, then one per Policy field, in its order
SETTINGS: dict[str, OwnerSetting] = {r.name: r for r in OWNER_SETTINGS}  # by name (the secrets table's key)


def limit_ranges() -> dict[str, tuple[float, float]]:
    """Each ranged setting's (low, high); a limit on RunConfig fields the capped field's range (LIMIT_RANGES)."""
    ranges = {r.name: (r.low, r.high) for r in OWNER_SETTINGS if r.low is not None and r.high is not None}
    return ranges | {name: (low, high) for name, low, high in LIMIT_RANGES}


def _num(x: float) -> Any:
    return int(x) if isinstance(x, float) and x.is_integer() else x


# --- reading the owner's settings ------------------------------------------------------------------------------


def _parse(row: OwnerSetting, raw: object):
    kind, where = row.kind, row.where
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
    unknown = sorted(set(secrets) - set(SETTINGS) - {PRESENTER_KEY.name})
    if unknown:
        raise ValueError(f"Unknown setting(s) in the [specviz] table of secrets.toml: {', '.join(unknown)}. Known: {', '.join(SETTINGS)}.")
    values = {}
    for name, row in SETTINGS.items():
        raw = env.get(row.env)
        if raw is None or (isinstance(raw, str) and not raw.strip() and row.kind != "bool"):
            raw = secrets.get(name)
        if raw is not None:
            values[name] = _parse(row, raw)
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
