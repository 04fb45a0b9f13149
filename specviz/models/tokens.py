"""Token id -> the raw bytes it stands for, so a token that is a piece of a character keeps its bytes.

Byte-level BPE (GPT-2, SmolLM, Qwen, Llama 3) writes each byte as one printable character (GPT-2's
bytes_to_unicode map) and splits non-ASCII characters across tokens; SentencePiece with byte fallback
(Llama 2, Mistral) writes a lone byte as a token like ``<0xE6>``. Decoding such a token alone gives ``�``;
its bytes say which piece it is. Other tokens are their decoded text, as UTF-8."""

from __future__ import annotations

import re
from functools import lru_cache

from transformers import PreTrainedTokenizerBase

BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")
SENTENCEPIECE_SPACE = "▁"  # U+2581, SentencePiece's word-start mark


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    """GPT-2's bytes_to_unicode map, inverted: printable character -> the byte it stands for."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def is_byte_level(tokenizer: PreTrainedTokenizerBase) -> bool:
    """True when the tokenizer's decoder is (or contains) tokenizers' ByteLevel decoder."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    return decoder is not None and "ByteLevel" in repr(decoder)


def token_bytes(tokenizer: PreTrainedTokenizerBase, token_id: int) -> bytes:
    """The bytes one token stands for: byte-level pieces and <0xNN> byte-fallback tokens by their bytes,
    special and added tokens and everything else by their decoded text."""
    token_id = int(token_id)
    piece = tokenizer.convert_ids_to_tokens(token_id)
    special = token_id in set(getattr(tokenizer, "all_special_ids", ()))
    if isinstance(piece, str) and not special:
        match = BYTE_FALLBACK.fullmatch(piece)
        if match:
            return bytes([int(match.group(1), 16)])
        if is_byte_level(tokenizer) and piece not in getattr(tokenizer, "added_tokens_encoder", {}):
            table = byte_decoder()
            if piece and all(ch in table for ch in piece):
                return bytes(table[ch] for ch in piece)
        elif SENTENCEPIECE_SPACE in piece:  # decoding one SentencePiece token alone drops its leading space
            return piece.replace(SENTENCEPIECE_SPACE, " ").encode("utf-8")
    return tokenizer.decode([token_id]).encode("utf-8")
