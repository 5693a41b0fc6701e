"""What a request reserves: an upper bound of its input tokens (seed 002 "Model Client Throughput").

The limiter must reserve before the call, and only some providers can count a request
cheaply and exactly (the local model's tokenizer; OpenAI Responses' input-token endpoint
costs a round trip). For the rest the gateway reserves an UPPER BOUND and settles with the
usage the provider reports, so a request never counts for less than it will use:

- Text: byte-level BPE tokenizers (OpenAI's o200k/cl100k, Anthropic's, Llama's, SmolLM2's)
  start from one token per byte and only merge, so a text never has more tokens than its
  UTF-8 bytes. The serialized request (`ModelRequest.ByteSize()`) holds every text, tool
  schema, argument string and replayed block byte for byte plus a few bytes of framing per
  field, so its size bounds all of them together.
- What the provider adds around the text: a chat template's role and separator tokens
  (a handful per message: `PER_MESSAGE_TOKENS`), a tool's rendering beyond its schema's
  bytes (`PER_TOOL_TOKENS`), the tool-use instructions a provider prepends when tools are
  offered (Anthropic documents 346 tokens, older models up to 530: `TOOLS_PREAMBLE_TOKENS`),
  and a reply primer (`BASE_TOKENS`).
- Images: priced by the provider from their dimensions, not their bytes, after scaling
  them down; `IMAGE_TOKENS` bounds one image on the current OpenAI and Anthropic models
  (Anthropic about 1,600, OpenAI high detail up to a few thousand), so inline image bytes
  are replaced by it.

The bound is typically 3-4x the true count for English text; the excess is held only
while the call is in flight (settling returns it). Where that matters (long contexts near
the budget), `AGENTRT_LIMITER_EXACT_COUNT` counts OpenAI Responses requests first, and a
bound larger than the whole budget is recounted exactly when the provider can.
"""

from __future__ import annotations

from agentrt.v1 import gateway_service_pb2 as g

BASE_TOKENS = 16
PER_MESSAGE_TOKENS = 8
PER_TOOL_TOKENS = 32
TOOLS_PREAMBLE_TOKENS = 600
IMAGE_TOKENS = 6_400


def input_token_bound(request: g.ModelRequest) -> int:
    """Return an upper bound of request's input tokens on any supported provider.

    Args:
        request: a validated provider-neutral request.

    Returns:
        Tokens (>= BASE_TOKENS): the request's serialized bytes, minus inline image
        bytes, plus the allowances of the module docstring.
    """
    size = request.ByteSize()
    images = 0
    for message in request.messages:
        for block in message.content:
            if block.WhichOneof("block") == "image":
                images += 1
                size -= len(block.image.data)
    bound = BASE_TOKENS + size + images * IMAGE_TOKENS
    bound += PER_MESSAGE_TOKENS * (len(request.messages) + (1 if request.system else 0))
    if request.tools or request.settings.output_json_schema:
        # A structured output is a tool (or a schema rendered like one) on some providers.
        bound += TOOLS_PREAMBLE_TOKENS + PER_TOOL_TOKENS * (len(request.tools) + 1)
    return bound
