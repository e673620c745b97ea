"""The OpenAI-compatible chat API as the vLLM backend speaks it: the request body it sends and the streamed chunks
it reads back (with vLLM's extensions: token ids in each chunk, prompt-cache hits in the final usage)."""

from __future__ import annotations

import base64
import json
import mimetypes
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

import httpx

from mai.types import Decoding, GenRequest


class ServerGone(Exception):
    """The server stopped answering mid-request (the request can be retried on a restarted server)."""


# --- the request ---------------------------------------------------------------------------------------------

class ImageUrl(TypedDict):
    url: str


class ImageUrlPart(TypedDict):
    type: Literal["image_url"]
    image_url: ImageUrl


class TextPart(TypedDict):
    type: Literal["text"]
    text: str


class ChatMessage(TypedDict):
    role: Literal["user"]
    content: list[ImageUrlPart | TextPart]


class StreamOptions(TypedDict):
    include_usage: bool


# the functional form: the body has a field named `n`, and every decoding parameter is explicit
ChatCompletionBody = TypedDict("ChatCompletionBody", {
    "model": str, "messages": list[ChatMessage],
    "max_tokens": int, "min_tokens": int,
    "temperature": float, "top_p": float, "top_k": int, "min_p": float, "seed": int, "n": int,
    "repetition_penalty": float, "presence_penalty": float, "frequency_penalty": float,
    "stop_token_ids": list[int], "ignore_eos": bool, "skip_special_tokens": bool,
    "stream": bool, "stream_options": StreamOptions, "return_token_ids": bool,
})


def request_body(served_name: str, request: GenRequest, stop_ids: list[int]) -> ChatCompletionBody:
    """Images first, then the text: the layout the transformers backend renders with the same chat template,
    so image + question form the prefix that S2 (after R) and RT (after S) find in the prefix cache."""
    decoding: Decoding = request.decoding
    if not decoding.greedy:
        raise ValueError("only greedy decoding is supported (the paper's setting)")
    content: list[ImageUrlPart | TextPart] = [{"type": "image_url", "image_url": {"url": data_url(Path(p))}}
                                              for p in request.prompt.image_paths]
    content.append({"type": "text", "text": request.prompt.text})
    return {
        "model": served_name, "messages": [{"role": "user", "content": content}],
        "max_tokens": decoding.max_new_tokens, "min_tokens": decoding.min_new_tokens,
        "temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "seed": 0, "n": 1,
        "repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
        "stop_token_ids": stop_ids, "ignore_eos": False, "skip_special_tokens": True,
        "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True,
    }


def data_url(path: Path) -> str:
    mime = mimetypes.guess_type(path.name)[0] or "image/png"
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


# --- the streamed response -----------------------------------------------------------------------------------

class PromptTokensDetails(TypedDict, total=False):
    cached_tokens: int | None


class UsageJson(TypedDict, total=False):
    prompt_tokens: int
    completion_tokens: int
    prompt_tokens_details: PromptTokensDetails | None


class DeltaJson(TypedDict, total=False):
    content: str | None


class ChoiceJson(TypedDict, total=False):
    token_ids: list[int] | None
    delta: DeltaJson
    finish_reason: str | None


class ChunkJson(TypedDict, total=False):
    choices: list[ChoiceJson]
    usage: UsageJson | None
    error: object


def stream_chunks(response: httpx.Response) -> Iterator[ChunkJson]:
    """The server-sent events of a streamed completion; an error event means the engine failed mid-request."""
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            chunk: ChunkJson = json.loads(line[6:])
            if "error" in chunk:
                raise ServerGone(str(chunk["error"]))
            yield chunk


@dataclass
class StreamedCompletion:
    """What a streamed completion delivered so far: token ids (with their first and last arrival), text pieces,
    the finish reason and the final usage chunk."""

    started: float
    token_ids: list[int] = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    finish: str | None = None
    usage: UsageJson | None = None
    first_at: float | None = None
    last_at: float | None = None

    def add(self, chunk: ChunkJson) -> None:
        if chunk.get("usage"):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices", []):
            new = choice.get("token_ids") or []
            if new:
                self.last_at = time.perf_counter()
                self.first_at = self.first_at or self.last_at
                self.token_ids.extend(new)
            self.texts.append(choice.get("delta", {}).get("content") or "")
            self.finish = choice.get("finish_reason") or self.finish

    @property
    def complete(self) -> bool:
        """Both the finish reason and the usage arrived (a stream cut off mid-way lacks them)."""
        return self.finish is not None and bool(self.usage)

    @property
    def prompt_tokens(self) -> int:
        return int((self.usage or {})["prompt_tokens"])

    @property
    def completion_tokens(self) -> int:
        """The server's count; the ids received when it gives none."""
        return int((self.usage or {}).get("completion_tokens", len(self.token_ids)))

    @property
    def cached_prompt_tokens(self) -> int:
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        return int(details.get("cached_tokens") or 0)
