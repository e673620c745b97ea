"""A model's KV cache of the image + question prefix, kept per process and reused by that model's later prompts
(transformers backend).

Every prompt kind lays a sample out as chat header, image, question, newline, instruction (mai/prompts.py), so a
model's prompts of one sample share everything up to the instruction: the small model's S, R and S2, the large
model's S and RT. The MV1 stage prefills both models' S prompts for every sample; the engine keeps each prompt's
keys and values here, and a later prompt of the same image (R, S2, RT) prefills only what follows the longest
common token prefix: the image is not encoded again and its tokens are not recomputed. This is the transformers
counterpart of vLLM's prefix caching.

Outputs stay token-identical (float32 greedy; tests/test_speedup.py): the reused keys and values are those a full
prefill computes for the same tokens at the same positions, and the continuation gets the M-RoPE position offset
(`rope_deltas`) its own prefix had. Qwen-VL models keep that offset as mutable model state set by each prefill, so
a continuation must restore its prefix's offset right before it runs (an offset left by another request made the
continuation wrong); the engine does so under its lock.

Memory: an entry holds 2 x layers x kv_heads x tokens x head_dim values: ~125 KiB (small) and ~375 KiB (large) for
an S prompt of the shipped shapes pair (~240 MB for both models' MV1 on the 480 test samples), ~150 MB for a
1k-token prompt of an 8B model in bfloat16. The store is bounded in bytes (MAI_PREFIX_CACHE_MB, default 1024) and
forgets the least recently used entry, on the device the model computes on; a batch whose prompts do not fit in it
together is not kept (they would only evict each other, after a copy each); MAI_PREFIX_CACHE_MB=0 turns reuse off.
Prompts without an image are not kept (their prefix is a few text tokens).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from mai.backends.processor import image_file_key

PREFIX_CACHE_BYTES = int(os.environ.get("MAI_PREFIX_CACHE_MB", "1024")) << 20


@dataclass(frozen=True)
class CachedPrefix:
    """One prompt's prefill: its token ids, per layer its keys and values (kv_heads, tokens, head_dim), and the
    M-RoPE offset (position - index) of the tokens that follow its last image."""

    token_ids: tuple[int, ...]
    keys: tuple[Any, ...]
    values: tuple[Any, ...]
    rope_delta: int

    @property
    def nbytes(self) -> int:
        return int(sum(t.element_size() * t.nelement() for t in (*self.keys, *self.values)))


@dataclass(frozen=True)
class PrefixHit:
    """A cached prompt whose first `tokens` token ids a request shares (the image among them)."""

    prefix: CachedPrefix
    tokens: int


Files = tuple[tuple[str, int, int], ...]


class PrefixStore:
    """Image files -> the cached prompts of those images (several questions may share an image), least recently
    used out once `max_bytes` is passed. One store per engine: keys and values belong to one model."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self._order: OrderedDict[tuple[Files, tuple[int, ...]], None] = OrderedDict()  # least recently used first
        self._by_files: dict[Files, dict[tuple[int, ...], CachedPrefix]] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def put(self, image_paths: tuple[str, ...], prefix: CachedPrefix) -> None:
        if not image_paths or prefix.nbytes > self.max_bytes:
            return
        files = tuple(image_file_key(p) for p in image_paths)
        with self._lock:
            self._order[(files, prefix.token_ids)] = None
            self._order.move_to_end((files, prefix.token_ids))
            prompts = self._by_files.setdefault(files, {})
            if prefix.token_ids in prompts:
                return
            prompts[prefix.token_ids] = prefix
            self.bytes += prefix.nbytes
            while self.bytes > self.max_bytes:
                (old_files, old_ids), _ = self._order.popitem(last=False)
                self.bytes -= self._by_files[old_files].pop(old_ids).nbytes
                if not self._by_files[old_files]:
                    del self._by_files[old_files]

    def find(self, image_paths: tuple[str, ...], token_ids: list[int], first_new_token: int) -> PrefixHit | None:
        """The cached prompt of these images sharing the longest token prefix with `token_ids`, if that prefix
        reaches `first_new_token` (the index after the request's last image token). At least the last token is
        left to prefill: its logits give the first output token."""
        if not image_paths or not self.enabled:
            return None
        files = tuple(image_file_key(p) for p in image_paths)
        ids = tuple(token_ids)
        with self._lock:
            best: PrefixHit | None = None
            for prefix in self._by_files.get(files, {}).values():
                shared = min(len(os.path.commonprefix([prefix.token_ids, ids])), len(ids) - 1)
                if shared >= first_new_token and (best is None or shared > best.tokens):
                    best = PrefixHit(prefix, shared)
            if best is None:
                self.misses += 1
                return None
            self._order.move_to_end((files, best.prefix.token_ids))
            self.hits += 1
            return best
