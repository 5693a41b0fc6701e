"""The gateway's provider adapters (seed 002 "Provider Adapters").

`provider` is the interface every adapter implements; `openai_responses` ("openai"),
`openai_chat` ("openai-chat"), `anthropic_messages` ("anthropic") and `local` (llama.cpp,
its prompt contract in `local_prompt`) map the canonical request and response to each wire;
`canonical` and `jsonspans` are what the adapters share (canonical blocks, exact tool-call
arguments). The gateway (gateway/gateway.py) picks one per request; nothing here knows of gRPC.
"""
