"""This server's prompt and memory budgets on the pages: the prompt's ids within the owner's token budget, and the
KV-cache memory a run or a long job reserves before its prefill (specviz.workshop.budgets holds the accounts).

    ids = prompt_ids(target, prompt, chat, max_new_tokens, k)     # ValueError naming the limit and the count
    reservation = reserve("step-through", target, tokens)         # OverBudget (a ValueError) when memory is full
    with job_memory(target, tokens, "The lab's sampler"): ...     # a long job holds its share while it runs
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from specviz.models import LoadedModel
from specviz.runs import check_prompt_tokens
from specviz.runs import prompt_ids as checked_prompt_ids
from specviz.ui.common.access import current_policy
from specviz.ui.common.client import current_client
from specviz.ui.common.sessions import session_id_now
from specviz.workshop.budgets import Reservation, default_kv_tokens, kv_budget, memory_limit, memory_share
from specviz.workshop.resources import singleton

log = logging.getLogger(__name__)

LOCAL_SESSION = "local"  # outside a server's script run (AppTest, scripts): one holder


def prompt_ids(target: LoadedModel, prompt: str, chat: bool, max_new_tokens: int, num_draft_tokens: int = 0) -> list[int]:
    """The ids a run of prompt prefills, within this server's token budget and the model's context (specviz.runs)."""
    return checked_prompt_ids(
        target, prompt, chat, max_new_tokens=max_new_tokens, num_draft_tokens=num_draft_tokens, max_prompt_tokens=current_policy().max_prompt_tokens
    )


def check_ids(target: LoadedModel, num_prompt_tokens: int, max_new_tokens: int, num_draft_tokens: int = 0) -> None:
    """The same checks for ids already encoded (a saved run's)."""
    check_prompt_tokens(target, num_prompt_tokens, max_new_tokens, num_draft_tokens, current_policy().max_prompt_tokens)


def memory_bytes(device: torch.device) -> int | None:
    """The memory the caches live in: the GPU's for a CUDA model, else the machine's RAM or this process's cgroup
    limit, whichever is smaller (None: unknown)."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.get_device_properties(device).total_memory)
        import psutil

        ram = int(psutil.virtual_memory().total)
    except Exception:  # an unknown size is not a reason to refuse
        return None
    limit = memory_limit()
    return min(ram, limit) if limit is not None else ram


def kv_limit(target: LoadedModel) -> int | None:
    """Live KV-cache tokens this process may hold: the owner's SPECVIZ_MAX_KV_TOKENS, else this process's share of
    the memory (SPECVIZ_KV_MEMORY_SHARE, a quarter by default; a room's replica gets its part of it) in tokens of this
    target's cache (None: the memory is unknown and the owner set no budget). Logged once per limit and target."""
    limit = current_policy().max_kv_tokens
    if limit:
        _log_once(limit, target, "SPECVIZ_MAX_KV_TOKENS")
        return limit
    memory = memory_bytes(target.device)
    if not memory:
        return None
    share = memory_share()
    limit = default_kv_tokens(memory, target.kv_bytes_per_token, share)
    _log_once(limit, target, f"{share:.1%} of {memory / 2**30:.1f} GiB")
    return limit


def _log_once(limit: int, target: LoadedModel, source: str) -> None:
    seen = singleton("kv-budget-logged", set)
    key = (limit, target.kv_bytes_per_token, source)
    if key not in seen:
        seen.add(key)
        mb = limit * target.kv_bytes_per_token / 2**20
        log.warning("KV-cache budget of this process: %s tokens of %s, %.0f MB (%s)", f"{limit:,}", target.name, mb, source)


def slot(kind: str) -> tuple[str, str]:
    """This browser session's slot for kind ("step-through", "job")."""
    return (session_id_now() or LOCAL_SESSION, kind)


def reserve(kind: str, target: LoadedModel, tokens: int, what: str = "Your run") -> Reservation:
    """Hold tokens of KV cache for this session's kind of work, before its prefill. OverBudget (a ValueError) with
    the numbers when the server's budget is spent."""
    limit = kv_limit(target)
    return kv_budget().reserve(slot(kind), tokens, limit if limit is not None else max(tokens, 1), what, client=current_client().address)


@contextmanager
def job_memory(target: LoadedModel, tokens: int, what: str) -> Iterator[Reservation]:
    """A long job's share of the budget, held while it runs."""
    reservation = reserve("job", target, tokens, what)
    try:
        yield reservation
    finally:
        reservation.release()
